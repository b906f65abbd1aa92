/* What a device backend does when a call inside an operation fails (fatal.c). */
#ifndef DP_BACKEND_FATAL_H
#define DP_BACKEND_FATAL_H

/* Calls the handler set with dp_backend_set_fatal_handler, else reports and MPI_Aborts. */
_Noreturn void dp_backend_fatal(void);

#endif
