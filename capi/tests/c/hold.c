/*
 * One libnrt process of a shared device (run by capi/tests/c_api.rs): nrt_init on the cores
 * NEURON_RT_VISIBLE_CORES names and print "init STATUS"; with "hold", keep them until standard
 * input closes (or the process is killed), else nrt_close at once. Exits 0 when nrt_init's
 * status is the one expected (argv[2], default 0).
 *
 * usage: hold hold|try [EXPECTED_STATUS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nrt/nrt.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: hold hold|try [EXPECTED_STATUS]\n");
        return 2;
    }
    int expected = argc > 2 ? atoi(argv[2]) : 0;
    NRT_STATUS s = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "");
    printf("init %d\n", (int)s);
    fflush(stdout);
    if (s == NRT_SUCCESS && strcmp(argv[1], "hold") == 0) {
        char buf[64];
        while (read(0, buf, sizeof buf) > 0) {
        }
    }
    if (s == NRT_SUCCESS) nrt_close();
    return (int)s == expected ? 0 : 1;
}
