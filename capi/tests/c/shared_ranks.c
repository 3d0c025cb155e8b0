/*
 * A fork-per-rank libnrt program (the torchrun pattern) on one shared device: the parent
 * forks one process per rank; rank r sets NEURON_RT_VISIBLE_CORES=r, nrt_init (it reserves
 * core r of the device named by NEURON_VFIO_DEVICE, e.g. sim:shared:cayman), loads the same
 * all-reduce NEFF with nrt_load_collectives as rank r of N, executes once and compares its
 * output with the expected bytes. Run by capi/tests/shared_collectives.rs.
 *
 * usage: shared_ranks ALLREDUCE.neff INPUTS.bin EXPECTED.bin RANKS
 *   INPUTS.bin: RANKS inputs of EXPECTED's size, rank after rank.
 * Prints one line per check; exits 0 only if every rank passed ("ALL OK" last).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nrt/nrt.h"

#include "check.h"

static int rank_main(int rank, int ranks, const void *neff, size_t neff_size, const char *input, const char *want,
                     size_t size) {
    char cores[16];
    snprintf(cores, sizeof cores, "%d", rank);
    setenv("NEURON_RT_VISIBLE_CORES", cores, 1);
    NRT_STATUS s = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    CHECK(s == NRT_SUCCESS, "rank %d: nrt_init (core %s) -> %d", rank, cores, s);
    if (s != NRT_SUCCESS) return 1;
    nrt_model_t *model = NULL;
    s = nrt_load_collectives(neff, neff_size, -1, -1, (uint32_t)rank, (uint32_t)ranks, &model);
    CHECK(s == NRT_SUCCESS && model != NULL, "rank %d: nrt_load_collectives -> %d", rank, s);
    if (s != NRT_SUCCESS) return 1;
    nrt_tensor_t *tin = NULL, *tout = NULL;
    nrt_tensor_set_t *ins = NULL, *outs = NULL;
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, size, "input", &tin) == NRT_SUCCESS,
          "rank %d: input tensor", rank);
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, size, "output", &tout) == NRT_SUCCESS,
          "rank %d: output tensor", rank);
    CHECK(nrt_tensor_write(tin, input, 0, size) == NRT_SUCCESS, "rank %d: nrt_tensor_write", rank);
    CHECK(nrt_allocate_tensor_set(&ins) == NRT_SUCCESS && nrt_allocate_tensor_set(&outs) == NRT_SUCCESS,
          "rank %d: tensor sets", rank);
    CHECK(nrt_add_tensor_to_tensor_set(ins, "input", tin) == NRT_SUCCESS &&
              nrt_add_tensor_to_tensor_set(outs, "output", tout) == NRT_SUCCESS,
          "rank %d: bind tensors", rank);
    s = nrt_execute(model, ins, outs);
    CHECK(s == NRT_SUCCESS, "rank %d: nrt_execute -> %d", rank, s);
    char *out = calloc(1, size);
    CHECK(out && nrt_tensor_read(tout, out, 0, size) == NRT_SUCCESS, "rank %d: nrt_tensor_read", rank);
    CHECK(out && memcmp(out, want, size) == 0, "rank %d: output bit-exact", rank);
    free(out);
    nrt_destroy_tensor_set(&ins);
    nrt_destroy_tensor_set(&outs);
    nrt_tensor_free(&tin);
    nrt_tensor_free(&tout);
    CHECK(nrt_unload(model) == NRT_SUCCESS, "rank %d: nrt_unload", rank);
    nrt_close();
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s ALLREDUCE.neff INPUTS.bin EXPECTED.bin RANKS\n", argv[0]);
        return 2;
    }
    size_t neff_size = 0, inputs_size = 0, size = 0;
    void *neff = read_file(argv[1], &neff_size);
    char *inputs = read_file(argv[2], &inputs_size);
    char *want = read_file(argv[3], &size);
    int ranks = atoi(argv[4]);
    CHECK(ranks > 0 && inputs_size == size * (size_t)ranks, "%d ranks, %zu input bytes each", ranks, size);
    if (failures) return finish();
    pid_t pids[64];
    for (int r = 0; r < ranks && r < 64; r++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) _exit(rank_main(r, ranks, neff, neff_size, inputs + size * (size_t)r, want, size));
        CHECK(p > 0, "fork rank %d", r);
        pids[r] = p;
    }
    for (int r = 0; r < ranks && r < 64; r++) {
        int st = 0;
        pid_t w = waitpid(pids[r], &st, 0);
        CHECK(w == pids[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d passed", r);
    }
    free(neff);
    free(inputs);
    free(want);
    return finish();
}
