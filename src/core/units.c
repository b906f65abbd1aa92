#include "dp/units.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

static unsigned suffix_shift(char suffix)
{
    switch (toupper((unsigned char)suffix)) {
    case 'K': return 10;
    case 'M': return 20;
    case 'G': return 30;
    default: return 0;
    }
}

int dp_parse_bytes(const char *text, size_t *bytes)
{
    if (!isdigit((unsigned char)text[0]))
        return 0;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    unsigned shift = suffix_shift(*end);
    if (shift)
        end++;
    if (*end || errno || value > (SIZE_MAX >> shift))
        return 0;
    *bytes = (size_t)value << shift;
    return 1;
}
