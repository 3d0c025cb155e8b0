/*
 * libnrt's system trace through the public nrt_sys_trace.h (nrt.h runs the models;
 * nrt_experimental.h its tensor info; nrt_profile.h records the runtime's own device timing, which the Rust test compares the
 * nc_exec_running spans with): event types, capture per NC and per event type, ring
 * capacity, fetch per NC and per count, fetched events gone, start/stop statuses.
 * usage: sys_trace MODEL_1NC.neff MODEL_2NC.neff INPUT.bin OUTPUT_DIR
 * Prints "file <name> <path>" for every document it wrote (the Rust test parses them).
 */
#include <stdint.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_profile.h"
#include "nrt/nrt_sys_trace.h"

struct bound {
    nrt_model_t *model;
    nrt_tensor_info_array_t *info;
    nrt_tensor_set_t *ins, *outs;
    nrt_tensor_t *ts[16];
    uint64_t n;
};

static void bind(struct bound *b, const char *neff_path, const void *input, size_t in_size) {
    size_t neff_size = 0;
    void *neff = read_file(neff_path, &neff_size);
    CHECK(nrt_load(neff, neff_size, 0, -1, &b->model) == NRT_SUCCESS, "nrt_load %s", neff_path);
    free(neff);
    CHECK(nrt_get_model_tensor_info(b->model, &b->info) == NRT_SUCCESS, "nrt_get_model_tensor_info");
    nrt_allocate_tensor_set(&b->ins);
    nrt_allocate_tensor_set(&b->outs);
    b->n = b->info->tensor_count < 16 ? b->info->tensor_count : 16;
    for (uint64_t i = 0; i < b->n; i++) {
        nrt_tensor_info_t *ti = &b->info->tensor_array[i];
        nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_HOST, -1, ti->size, ti->name, &b->ts[i]);
        if (ti->usage == NRT_TENSOR_USAGE_INPUT) {
            nrt_tensor_write(b->ts[i], input, 0, ti->size < in_size ? ti->size : in_size);
            nrt_add_tensor_to_tensor_set(b->ins, ti->name, b->ts[i]);
        } else {
            nrt_add_tensor_to_tensor_set(b->outs, ti->name, b->ts[i]);
        }
    }
}

static void unbind(struct bound *b) {
    nrt_destroy_tensor_set(&b->ins);
    nrt_destroy_tensor_set(&b->outs);
    for (uint64_t i = 0; i < b->n; i++) nrt_tensor_free(&b->ts[i]);
    nrt_free_model_tensor_info(b->info);
    CHECK(nrt_unload(b->model) == NRT_SUCCESS, "nrt_unload");
}

static void execute(struct bound *b, int n) {
    for (int i = 0; i < n; i++) CHECK(nrt_execute(b->model, b->ins, b->outs) == NRT_SUCCESS, "nrt_execute");
}

/* Fetch with `fo` (NULL: everything), save as DIR/NAME.json, return the text (caller frees). */
static char *fetch(const nrt_sys_trace_fetch_options_t *fo, const char *dir, const char *name) {
    char *buf = NULL;
    size_t len = 0;
    NRT_STATUS s = nrt_sys_trace_fetch_events(&buf, &len, fo);
    CHECK(s == NRT_SUCCESS && buf && strlen(buf) == len, "nrt_sys_trace_fetch_events (%s) -> %d", name, s);
    if (!buf) return calloc(1, 1);
    CHECK(strncmp(buf, "{\"events\":[", 11) == 0, "%s: an {\"events\":[...]} document", name);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, len, f);
        fclose(f);
        printf("file %s %s\n", name, path);
    }
    char *copy = malloc(len + 1);
    memcpy(copy, buf, len + 1);
    nrt_sys_trace_buffer_free(buf);
    return copy;
}

#define RUNNING "\"event_type\":\"nc_exec_running\",\"category\":\"hardware\",\"phase\":"

static const char *const EXPECTED_TYPES[] = {
    "nc_exec_running", "cc_running", "cc_exec_barrier", "numerical_err",   "nc_model_switch",
    "timestamp_sync_point", "hw_notify", "nrt_load", "nrt_execute", "nrt_tensor_read", "nrt_tensor_write",
};

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    const char *dir = argv[4];
    char path[4096];

    /* Event types: libnrt's names, before nrt_init too. */
    const char **types = NULL;
    size_t ntypes = 0;
    CHECK(nrt_sys_trace_get_event_types(&types, &ntypes) == NRT_SUCCESS && ntypes > 0, "event types (%zu)", ntypes);
    for (size_t k = 0; k < sizeof EXPECTED_TYPES / sizeof *EXPECTED_TYPES; k++) {
        int found = 0;
        for (size_t i = 0; i < ntypes; i++) found |= strcmp(types[i], EXPECTED_TYPES[k]) == 0;
        CHECK(found, "event type %s listed", EXPECTED_TYPES[k]);
    }
    CHECK(nrt_sys_trace_start(NULL) == NRT_UNINITIALIZED, "nrt_sys_trace_start before nrt_init -> %d",
          NRT_UNINITIALIZED);

    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS, "nrt_init");
    size_t in_size = 0;
    void *input = read_file(argv[3], &in_size);
    struct bound m1 = {0}, m2 = {0};
    bind(&m1, argv[1], input, in_size);
    bind(&m2, argv[2], input, in_size);

    nrt_sys_trace_config_t *sc = NULL;
    const char **on = NULL;
    size_t non = 0;
    CHECK(nrt_sys_trace_config_allocate(&sc) == NRT_SUCCESS, "nrt_sys_trace_config_allocate");
    CHECK(nrt_sys_trace_config_set_capture_enabled_for_event_type(sc, "nope", false) == NRT_INVALID,
          "unknown event type -> %d", NRT_INVALID);
    CHECK(nrt_sys_trace_config_set_capture_enabled_for_event_type(sc, "hw_notify", false) == NRT_SUCCESS,
          "disable hw_notify");
    CHECK(nrt_sys_trace_config_get_enabled_event_types(sc, &on, &non) == NRT_SUCCESS && non == ntypes - 1,
          "all types but one enabled (%zu of %zu)", non, ntypes);
    nrt_sys_trace_free_event_types(on, non);
    nrt_sys_trace_config_set_defaults(sc);

    /* 1. Everything, around five executions of the 1-NC model profiled by nrt_profile. */
    CHECK(nrt_sys_trace_start(NULL) == NRT_SUCCESS, "nrt_sys_trace_start (defaults)");
    CHECK(nrt_sys_trace_start(NULL) == NRT_INVALID, "second start -> %d", NRT_INVALID);
    snprintf(path, sizeof path, "%s/profile.json", dir);
    CHECK(nrt_profile_start(m1.model, path) == NRT_SUCCESS, "nrt_profile_start");
    execute(&m1, 5);
    CHECK(nrt_profile_stop(path) == NRT_SUCCESS, "nrt_profile_stop");
    printf("file profile %s\n", path);
    char *t = fetch(NULL, dir, "all");
    CHECK(count_of(t, RUNNING "\"start\"") == 5 && count_of(t, RUNNING "\"stop\"") == 5,
          "all: an nc_exec_running start/stop pair per execution (%d, %d)", count_of(t, RUNNING "\"start\""),
          count_of(t, RUNNING "\"stop\""));
    CHECK(count_of(t, "\"event_type\":\"timestamp_sync_point\"") == 5, "all: a sync point per execution");
    CHECK(count_of(t, "\"event_type\":\"nrt_execute\",\"category\":\"software\",\"phase\":\"start\"") == 5,
          "all: the nrt_execute calls");
    free(t);
    t = fetch(NULL, dir, "again");
    CHECK(count_of(t, "nc_exec_running") == 0, "fetched events are gone");
    free(t);
    CHECK(nrt_sys_trace_stop() == NRT_SUCCESS, "nrt_sys_trace_stop");
    CHECK(nrt_sys_trace_stop() == NRT_INVALID, "second stop -> %d", NRT_INVALID);

    /* 2. Capture filters: NC 0 off, every type but nc_exec_running off. */
    for (size_t i = 0; i < ntypes; i++)
        if (strcmp(types[i], "nc_exec_running") != 0)
            nrt_sys_trace_config_set_capture_enabled_for_event_type(sc, types[i], false);
    nrt_sys_trace_config_set_capture_enabled_for_nc(sc, 0, false);
    CHECK(nrt_sys_trace_start(sc) == NRT_SUCCESS, "nrt_sys_trace_start (filtered)");
    execute(&m2, 3);
    execute(&m1, 2);
    t = fetch(NULL, dir, "filtered");
    CHECK(count_of(t, "\"event_type\"") == 6 && count_of(t, RUNNING "\"start\"") == 3,
          "filtered: only NC 1's nc_exec_running pairs (%d events)", count_of(t, "\"event_type\""));
    CHECK(count_of(t, "\"nc_idx\":0") == 0, "filtered: nothing of NC 0");
    free(t);
    CHECK(nrt_sys_trace_stop() == NRT_SUCCESS, "nrt_sys_trace_stop (filtered)");

    /* 3. Ring capacity and fetch options: 4 events per NC kept; NC 1's oldest 2 fetched. */
    nrt_sys_trace_config_set_capture_enabled_for_nc(sc, 0, true);
    nrt_sys_trace_config_set_max_events_per_nc(sc, 4);
    CHECK(nrt_sys_trace_start(sc) == NRT_SUCCESS, "nrt_sys_trace_start (4 per NC)");
    execute(&m2, 3);
    nrt_sys_trace_fetch_options_t *fo = NULL;
    CHECK(nrt_sys_trace_fetch_options_allocate(&fo) == NRT_SUCCESS, "nrt_sys_trace_fetch_options_allocate");
    nrt_sys_trace_fetch_options_set_nc_idx(fo, 1);
    nrt_sys_trace_fetch_options_set_max_events_per_nc(fo, 2);
    t = fetch(fo, dir, "nc1");
    CHECK(count_of(t, "\"event_type\"") == 2 && count_of(t, "\"nc_idx\":1") == 2 &&
              count_of(t, RUNNING "\"start\"") == 1 && count_of(t, RUNNING "\"stop\"") == 1,
          "nc1: NC 1's oldest kept pair (%d events)", count_of(t, "\"event_type\""));
    free(t);
    nrt_sys_trace_fetch_options_set_defaults(fo);
    t = fetch(fo, dir, "rest");
    CHECK(count_of(t, "\"nc_idx\":0") == 4 && count_of(t, "\"nc_idx\":1") == 2,
          "rest: NC 0's 4 kept events and NC 1's other 2 (%d, %d)", count_of(t, "\"nc_idx\":0"),
          count_of(t, "\"nc_idx\":1"));
    free(t);
    nrt_sys_trace_fetch_options_free(fo);
    CHECK(nrt_sys_trace_stop() == NRT_SUCCESS, "nrt_sys_trace_stop (4 per NC)");
    nrt_sys_trace_config_free(sc);
    nrt_sys_trace_free_event_types(types, ntypes);

    unbind(&m1);
    unbind(&m2);
    free(input);
    nrt_close();
    return finish();
}
