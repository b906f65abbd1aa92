/* Data-parallel inference, as the documents describe it: rank 0 reads the inputs, MPI_Scatterv
 * gives each rank its rows, every rank runs the --init model in eval mode, MPI_Gatherv brings
 * the outputs to rank 0, which writes them atomically. The rows are cut into blocks of
 * BLOCK_ROWS at fixed global positions (the last padded with zeros) and each rank takes whole
 * blocks, so every forward computes the same rows in the same places whatever the world size:
 * the file is bitwise the same for any W without asking the BLAS to round a row alike in
 * matrices of other heights. */
#include "config.h"

#include "dp/train.h"

#include "dp/atomic_file.h"
#include "dp/error.h"
#include "src/backend/kernel_math.h"
#include "src/train/trainer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_ROWS 256

typedef struct predictor {
    const dp_options *o;
    dp_comm *comm;
    dp_engine *engine;         /* forward-only: the device and the model */
    float *host_params, *host_buffers; /* --init's values on their way to the model */
    size_t rows, dim;          /* the whole input: rows x dim */
    dp_dims sample;            /* one row's shape: [D] features or [C, H, W] images */
    dp_range mine;             /* this rank's rows */
    float *inputs;             /* rank 0: every row; the others: NULL */
    float *my_inputs, *my_outputs;
    int *counts, *offsets;     /* MPI_Scatterv/Gatherv, in rows */
    float *dev_x;
} predictor;

/* Rank 0 reads the inputs; every rank learns their shape. */
static int read_inputs(predictor *p)
{
    const dp_options *o = p->o;
    dp_npy npy = {0};
    struct {
        unsigned long long rows;
        dp_dims sample;
    } shape = {0};
    int status = 0;
    if (p->comm->rank == 0) {
        /* The output first: a bad path fails before any work. */
        status = dp_check_outputs_apart(o);
        if (!status)
            status = dp_check_output_file("--output", o->output_path);
        if (!status)
            status = dp_npy_read(o->predict_path, &npy);
        /* The same arrays training takes: [N, D] samples, [N, C, H, W] images, [N, H, W] too. */
        if (!status && (status = dp_npy_features(o->predict_path, &npy, &shape.sample)))
            dp_fail_context(status, "--predict");
        if (!status && npy.shape[0] > INT_MAX)
            status = dp_fail(DP_EINVAL, "--predict %s: %zu rows, more than MPI's int counts hold (%d)", o->predict_path,
                             npy.shape[0], INT_MAX);
        if (!status && o->model.from_layers && dp_dims_numel(&shape.sample) != o->model.inputs)
            status = dp_fail(DP_EINVAL, "--predict %s has %lld features per sample but --layers starts with %d inputs",
                             o->predict_path, (long long)dp_dims_numel(&shape.sample), o->model.inputs);
        if (status) {
            dp_npy_free(&npy);
            return status;
        }
        shape.rows = npy.shape[0];
        p->inputs = npy.data;
    }
    if ((status = dp_comm_broadcast(p->comm, &shape, sizeof shape, 0)))
        return status;
    p->rows = (size_t)shape.rows;
    p->sample = shape.sample;
    p->dim = (size_t)dp_dims_numel(&p->sample);
    p->mine = dp_partition_blocks(p->rows, BLOCK_ROWS, p->comm->size, p->comm->rank);
    return 0;
}

/* The device, the model on it, and the --init parameters and buffers on every rank. */
static int open_model(predictor *p)
{
    dp_engine_device device = dp_trainer_device(p->o);
    int status = dp_engine_open_device(&p->engine, p->comm, &device);
    dp_engine *e = p->engine;
    if (!status)
        status = dp_engine_build_forward(e, &p->o->model, &p->sample, BLOCK_ROWS);
    if (status)
        return status;
    const dp_model *m = dp_engine_model(e);
    const dp_backend *be = dp_engine_backend(e);
    size_t params = dp_params_floats(&m->params), buffers = dp_params_floats(&m->buffers);
    p->host_params = dp_alloc((params + 1) * sizeof(float), "the host copy of the parameters");
    p->host_buffers = dp_alloc((buffers + 1) * sizeof(float), "the host copy of the running statistics");
    p->dev_x = be->alloc(be, BLOCK_ROWS * p->dim * sizeof(float), DP_MEM_ACTIVATIONS, "the input block");
    if (!p->host_params || !p->host_buffers || !p->dev_x)
        return DP_ENOMEM;
    status = p->comm->rank == 0 ? dp_trainer_load_model(p->o, m, p->host_params, p->host_buffers, m->counters) : 0;
    /* A --model spec takes its width from the inputs: a tensor of another shape may be theirs. */
    if (status == DP_ESHAPE && !p->o->model.from_layers)
        status = dp_fail_context(status, "--predict %s has %zu features per sample, the width --model '%s' takes "
                                 "there", p->o->predict_path, p->dim, p->o->model.text);
    if (!status)
        status = dp_engine_scatter_state(e, DP_STATE_PARAMETERS, p->host_params, 0);
    return status ? status : dp_engine_scatter_state(e, DP_STATE_STATISTICS, p->host_buffers, 0);
}

/* Row counts and offsets of every rank (whole blocks), for the v-collectives. */
static int plan_rows(predictor *p)
{
    int size = p->comm->size;
    p->counts = dp_calloc(2 * (size_t)size, sizeof *p->counts, "the row counts");
    if (!p->counts)
        return DP_ENOMEM;
    p->offsets = p->counts + size;
    for (int r = 0; r < size; r++) {
        dp_range range = dp_partition_blocks(p->rows, BLOCK_ROWS, size, r);
        p->counts[r] = (int)dp_range_size(range);
        p->offsets[r] = (int)range.begin;
    }
    return 0;
}

/* MPI_Scatterv of whole rows: a datatype of `width` elements keeps the counts in rows. */
static int scatter_rows(predictor *p)
{
    MPI_Datatype row;
    size_t mine = dp_range_size(p->mine);
    p->my_inputs = dp_alloc((mine ? mine : 1) * p->dim * sizeof(float), "this rank's input rows");
    if (!p->my_inputs)
        return DP_ENOMEM;
    DP_MPI_CHECK(MPI_Type_contiguous((int)p->dim, MPI_FLOAT, &row));
    DP_MPI_CHECK(MPI_Type_commit(&row));
    int status = MPI_Scatterv(p->inputs, p->counts, p->offsets, row, p->my_inputs, (int)mine, row, 0,
                              p->comm->comm);
    MPI_Type_free(&row);
    return status == MPI_SUCCESS ? 0 : dp_mpi_fail(status, "MPI_Scatterv", __FILE__, __LINE__);
}

/* Forward of this rank's blocks, each exactly BLOCK_ROWS rows; the outputs go to my_outputs. */
static int run_forward(predictor *p)
{
    dp_engine *e = p->engine;
    const dp_backend *be = dp_engine_backend(e);
    size_t mine = dp_range_size(p->mine), outputs = (size_t)dp_engine_model(e)->outputs;
    p->my_outputs = dp_alloc((mine ? mine : 1) * outputs * sizeof(float), "this rank's outputs");
    if (!p->my_outputs)
        return DP_ENOMEM;
    dp_nn_context ctx = {.be = be, .training = 0};
    for (size_t begin = 0; begin < mine; begin += BLOCK_ROWS) {
        size_t rows = mine - begin < BLOCK_ROWS ? mine - begin : BLOCK_ROWS;
        be->upload(be, p->dev_x, p->my_inputs + begin * p->dim, rows * p->dim * sizeof(float));
        if (rows < BLOCK_ROWS)
            be->zero(be, p->dev_x + rows * p->dim, (BLOCK_ROWS - rows) * p->dim);
        const float *out;
        int status = dp_engine_forward(e, &ctx, p->dev_x, BLOCK_ROWS, &out);
        if (status)
            return status;
        be->download(be, p->my_outputs + begin * outputs, out, rows * outputs * sizeof(float));
    }
    return 0;
}

/* MPI_Gatherv of every rank's output rows to rank 0, whose buffer it returns in *all. */
static int gather_outputs(predictor *p, float **all)
{
    size_t outputs = (size_t)dp_engine_model(p->engine)->outputs;
    *all = NULL;
    if (p->comm->rank == 0 && !(*all = dp_alloc((p->rows ? p->rows : 1) * outputs * sizeof(float), "the outputs")))
        return DP_ENOMEM;
    MPI_Datatype row;
    DP_MPI_CHECK(MPI_Type_contiguous((int)outputs, MPI_FLOAT, &row));
    DP_MPI_CHECK(MPI_Type_commit(&row));
    int status = MPI_Gatherv(p->my_outputs, (int)dp_range_size(p->mine), row, *all, p->counts, p->offsets, row, 0,
                             p->comm->comm);
    MPI_Type_free(&row);
    return status == MPI_SUCCESS ? 0 : dp_mpi_fail(status, "MPI_Gatherv", __FILE__, __LINE__);
}

/* Rank 0 writes the outputs, or each row's class (int64, as numpy's argmax). */
static int write_outputs(const predictor *p, float *outputs)
{
    const dp_options *o = p->o;
    int width = dp_engine_model(p->engine)->outputs;
    dp_npy array = {.dtype = DP_NPY_F32, .ndim = 2, .shape = {p->rows, (size_t)width}, .data = outputs};
    int64_t *classes = NULL;
    if (o->predict_classes) {
        classes = dp_alloc((p->rows ? p->rows : 1) * sizeof *classes, "the predicted classes");
        if (!classes)
            return DP_ENOMEM;
        for (size_t r = 0; r < p->rows; r++)
            classes[r] = dp_row_argmax(outputs + r * (size_t)width, width);
        array = (dp_npy){.dtype = DP_NPY_I64, .ndim = 1, .shape = {p->rows, 1}, .data = classes};
    }
    int status = dp_npy_write(o->output_path, &array);
    free(classes);
    return status;
}

static void free_predictor(predictor *p)
{
    free(p->inputs);
    free(p->my_inputs);
    free(p->my_outputs);
    free(p->counts);
    free(p->host_params);
    free(p->host_buffers);
    if (p->engine && dp_engine_backend(p->engine))
        dp_engine_backend(p->engine)->free(dp_engine_backend(p->engine), p->dev_x);
    dp_engine_close(p->engine);
}

int dp_predict(const dp_options *o, dp_comm *comm)
{
    predictor p = {.o = o, .comm = comm};
    double started = MPI_Wtime();
    int status = read_inputs(&p);
    if (!status)
        status = open_model(&p);
    if (!status)
        status = plan_rows(&p);
    double computing = MPI_Wtime();
    if (!status)
        status = scatter_rows(&p);
    if (!status)
        status = run_forward(&p);
    float *outputs = NULL;
    if (!status)
        status = gather_outputs(&p, &outputs);
    double computed = MPI_Wtime();
    if (!status && comm->rank == 0)
        status = write_outputs(&p, outputs);
    if (!status && comm->rank == 0 && !o->quiet)
        printf("predict: %zu rows x %zu features on %d rank%s (backend %s) in %.3f s (%.0f rows/s; scatter, "
               "forward and gather %.3f s): wrote %s, %s\n",
               p.rows, p.dim, comm->size, comm->size == 1 ? "" : "s", dp_engine_backend(p.engine)->describe(dp_engine_backend(p.engine)), MPI_Wtime() - started,
               (double)p.rows / (computed - computing), computed - computing, o->output_path,
               o->predict_classes ? "int64 classes [N]" : "float32 outputs [N, K]");
    free(outputs);
    free_predictor(&p);
    return status;
}
