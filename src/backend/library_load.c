/* Opening a CUDA library at run time (library_load.h). */
#include "src/backend/library_load.h"

#include <dlfcn.h>
#include <stdio.h>

int dp_library_load(const char *soname, const dp_symbol *symbols, size_t count, char *why, size_t size)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, size, "cannot open %s: %s", soname, dlerror());
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (!(*symbols[i].slot = dlsym(lib, symbols[i].name))) {
            snprintf(why, size, "%s lacks %s, which this build calls", soname, symbols[i].name);
            return -1;
        }
    return 0;
}
