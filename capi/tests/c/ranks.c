/*
 * One rank of a multi-process libnrt job, started by a launcher (Open MPI's mpirun, torchrun,
 * Slurm's srun) or by a test that sets exactly the variables such a launcher sets. Run by
 * capi/tests/launchers.rs.
 *
 * usage: ranks DIR OP... | ranks DIR --loop OP
 *
 * Rank and size come from the launcher's environment, as an application reads them:
 * OMPI_COMM_WORLD_RANK/SIZE (Open MPI), SLURM_PROCID/SLURM_NTASKS (Slurm), RANK/WORLD_SIZE
 * (torchrun). The bootstrap address and the visible cores are libnrt's business
 * (NEURON_RT_ROOT_COMM_ID, or torchrun's MASTER_ADDR/MASTER_PORT; the local rank).
 *
 * For each OP: nrt_load_collectives(DIR/OP.neff, rank of size), write DIR/OP.in.RANK into the
 * input tensor "in0", execute, compare the output tensor "output" with DIR/OP.want.RANK byte
 * for byte. --loop OP executes OP until an execution fails or DIR/stop appears, creating
 * DIR/ready.RANK after the first success; it prints the failing execution's status and how
 * long that execution took: "loop OP status S after T s".
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "nrt/nrt.h"

#include "check.h"

static int env_num(const char *a, const char *b, const char *c, long *out) {
    const char *names[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) {
            *out = strtol(v, NULL, 10);
            return 1;
        }
    }
    return 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static char *path_of(const char *dir, const char *op, const char *what, long rank) {
    static char buf[4096];
    if (rank < 0)
        snprintf(buf, sizeof buf, "%s/%s.%s", dir, op, what);
    else
        snprintf(buf, sizeof buf, "%s/%s.%s.%ld", dir, op, what, rank);
    return buf;
}

struct job {
    nrt_model_t *model;
    nrt_tensor_t *in, *out;
    nrt_tensor_set_t *ins, *outs;
    void *input, *want, *got;
    size_t in_len, want_len;
};

static int setup(struct job *j, const char *dir, const char *op, long rank, long size) {
    size_t neff_len = 0;
    void *neff = read_file(path_of(dir, op, "neff", -1), &neff_len);
    j->input = read_file(path_of(dir, op, "in", rank), &j->in_len);
    j->want = read_file(path_of(dir, op, "want", rank), &j->want_len);
    j->got = calloc(1, j->want_len + 1);
    NRT_STATUS s = nrt_load_collectives(neff, neff_len, -1, -1, (uint32_t)rank, (uint32_t)size, &j->model);
    free(neff);
    CHECK(s == NRT_SUCCESS, "rank %ld/%ld %s: nrt_load_collectives -> %d", rank, size, op, (int)s);
    if (s != NRT_SUCCESS)
        return 0;
    s = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, j->in_len, "in0", &j->in);
    CHECK(s == NRT_SUCCESS, "rank %ld %s: allocate input -> %d", rank, op, (int)s);
    s = nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, j->want_len, "output", &j->out);
    CHECK(s == NRT_SUCCESS, "rank %ld %s: allocate output -> %d", rank, op, (int)s);
    s = nrt_tensor_write(j->in, j->input, 0, j->in_len);
    CHECK(s == NRT_SUCCESS, "rank %ld %s: write input -> %d", rank, op, (int)s);
    CHECK(nrt_allocate_tensor_set(&j->ins) == NRT_SUCCESS && nrt_allocate_tensor_set(&j->outs) == NRT_SUCCESS &&
              nrt_add_tensor_to_tensor_set(j->ins, "in0", j->in) == NRT_SUCCESS &&
              nrt_add_tensor_to_tensor_set(j->outs, "output", j->out) == NRT_SUCCESS,
          "rank %ld %s: tensor sets", rank, op);
    return failures == 0;
}

static void teardown(struct job *j) {
    if (j->ins)
        nrt_destroy_tensor_set(&j->ins);
    if (j->outs)
        nrt_destroy_tensor_set(&j->outs);
    if (j->in)
        nrt_tensor_free(&j->in);
    if (j->out)
        nrt_tensor_free(&j->out);
    if (j->model)
        nrt_unload(j->model);
    free(j->input);
    free(j->want);
    free(j->got);
}

/* Execute once and compare; returns the status. */
static NRT_STATUS run_once(struct job *j, long rank, const char *op, int check) {
    NRT_STATUS s = nrt_execute(j->model, j->ins, j->outs);
    if (!check)
        return s;
    CHECK(s == NRT_SUCCESS, "rank %ld %s: nrt_execute -> %d", rank, op, (int)s);
    if (s == NRT_SUCCESS) {
        s = nrt_tensor_read(j->out, j->got, 0, j->want_len);
        CHECK(s == NRT_SUCCESS && memcmp(j->got, j->want, j->want_len) == 0,
              "rank %ld %s: output equals the host reference (%zu bytes)", rank, op, j->want_len);
    }
    return s;
}

int main(int argc, char **argv) {
    long rank = -1, size = -1;
    if (argc < 3 || !env_num("OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK", &rank) ||
        !env_num("OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "WORLD_SIZE", &size)) {
        fprintf(stderr, "usage: ranks DIR OP... | ranks DIR --loop OP, under a launcher\n");
        return 2;
    }
    const char *dir = argv[1];
    NRT_STATUS s = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    CHECK(s == NRT_SUCCESS, "rank %ld/%ld: nrt_init -> %d", rank, size, (int)s);
    if (s != NRT_SUCCESS)
        return 1;
    uint32_t visible = 0;
    s = nrt_get_visible_nc_count(&visible);
    CHECK(s == NRT_SUCCESS, "rank %ld/%ld: visible_nc=%u", rank, size, visible);
    if (strcmp(argv[2], "--loop") == 0 && argc == 4) {
        struct job j = {0};
        if (setup(&j, dir, argv[3], rank, size) && run_once(&j, rank, argv[3], 1) == NRT_SUCCESS) {
            FILE *f = fopen(path_of(dir, "ready", "rank", rank), "w");
            if (f)
                fclose(f);
            char stop[4096];
            snprintf(stop, sizeof stop, "%s/stop", dir);
            double t0 = now_s();
            s = NRT_SUCCESS;
            while (s == NRT_SUCCESS && access(stop, F_OK) != 0) {
                t0 = now_s();
                s = run_once(&j, rank, argv[3], 0);
            }
            printf("loop %s status %d after %.3f s\n", argv[3], (int)s, now_s() - t0);
        }
        teardown(&j);
    } else {
        for (int i = 2; i < argc; i++) {
            struct job j = {0};
            if (setup(&j, dir, argv[i], rank, size))
                run_once(&j, rank, argv[i], 1);
            teardown(&j);
        }
    }
    nrt_close();
    if (failures == 0)
        printf("ALL OK\n");
    return failures == 0 ? 0 : 1;
}
