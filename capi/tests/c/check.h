/*
 * Shared helpers of the C API tests (run by capi/tests/c_api.rs): CHECK prints one line per
 * check, "ok" or "FAIL"; a program exits 0 only if every check passed ("ALL OK" last).
 */
#ifndef NRT_TEST_CHECK_H
#define NRT_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond) {                                                                        \
            printf("ok   ");                                                               \
        } else {                                                                           \
            printf("FAIL ");                                                               \
            failures++;                                                                    \
        }                                                                                  \
        printf(__VA_ARGS__);                                                               \
        printf("\n");                                                                      \
        fflush(stdout);                                                                    \
    } while (0)

static inline void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(2);
    }
    ((char *)buf)[n] = 0;
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* Occurrences of `needle` in `hay`. */
static inline int count_of(const char *hay, const char *needle) {
    int n = 0;
    size_t k = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + k, needle)) n++;
    return n;
}

static inline int finish(void) {
    if (failures == 0) {
        printf("ALL OK\n");
        return 0;
    }
    printf("%d FAILED\n", failures);
    return 1;
}

#endif
