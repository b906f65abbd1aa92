/* What a device backend does when a call inside an operation fails (fatal.c). */
#ifndef DP_BACKEND_FATAL_H
#define DP_BACKEND_FATAL_H

/* Calls the handler set with dp_backend_set_fatal_handler, else reports and MPI_Aborts. */
_Noreturn void dp_backend_fatal(void);

/* A checked call's status (0 or a recorded error): TRY returns it (while opening); MUST is for
 * the operations, which cannot, and ends the job. */
#define TRY(checked)                                                         \
    do {                                                                     \
        int status_ = (checked);                                             \
        if (status_)                                                         \
            return status_;                                                  \
    } while (0)
#define MUST(checked)                                                        \
    do {                                                                     \
        if (checked)                                                         \
            dp_backend_fatal();                                              \
    } while (0)

#endif
