/*
 * Status strings, version, instance info, memory stats, model info, device ids and the
 * calls that cannot apply on this runtime.
 * usage: info MODEL.neff
 */
#include <stdint.h>

#include "check.h"
#include "nrt/nrt.h"
#include "nrt/nrt_experimental.h"
#include "nrt/nrt_status.h"
#include "nrt/nrt_version.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    CHECK(strcmp(nrt_get_status_as_str(NRT_SUCCESS), "NRT_SUCCESS") == 0, "status 0 -> %s", nrt_get_status_as_str(NRT_SUCCESS));
    CHECK(strcmp(nrt_get_status_as_str(NRT_NETWORK_PROXY_FAILURE), "NRT_NETWORK_PROXY_FAILURE") == 0, "status 1206 -> %s",
          nrt_get_status_as_str(NRT_NETWORK_PROXY_FAILURE));
    CHECK(strcmp(nrt_get_status_as_str(NRT_QUEUE_EMPTY), "NRT_QUEUE_EMPTY") == 0, "status 15 -> %s",
          nrt_get_status_as_str(NRT_QUEUE_EMPTY));
    CHECK(strcmp(nrt_get_status_as_str((NRT_STATUS)4242), "NRT_UNKNOWN_STATUS") == 0, "status 4242 -> %s",
          nrt_get_status_as_str((NRT_STATUS)4242));

    nrt_instance_info_t ii;
    CHECK(nrt_get_instance_info(&ii, sizeof ii) == NRT_UNINITIALIZED, "nrt_get_instance_info before nrt_init -> 13");
    CHECK(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, NULL, NULL) == NRT_SUCCESS, "nrt_init");

    nrt_version_t v;
    memset(&v, 0, sizeof v);
    CHECK(nrt_get_version(&v, sizeof v) == NRT_SUCCESS && v.rt_major == 2, "nrt_get_version %lu.%lu (%s)",
          (unsigned long)v.rt_major, (unsigned long)v.rt_minor, v.rt_detail);

    memset(&ii, 0, sizeof ii);
    CHECK(nrt_get_instance_info(&ii, sizeof ii) == NRT_SUCCESS, "nrt_get_instance_info");
    printf("instance family %u size %u arch %s revision %s\n", ii.family, ii.size, ii.arch_name, ii.device_revision);
    CHECK(ii.size == NRT_INSTANCE_SIZE_UNKNOWN, "instance size unknown");
    nrt_instance_info_t small;
    memset(&small, 0x5a, sizeof small);
    CHECK(nrt_get_instance_info(&small, 4) == NRT_SUCCESS && small.family == ii.family && small.size == 0x5a5a5a5a,
          "nrt_get_instance_info writes only instance_info_len bytes");

    nrt_vnc_memory_stats_t m0, m1;
    size_t out = 0;
    CHECK(nrt_get_vnc_memory_stats(0, &m0, sizeof m0, &out) == NRT_SUCCESS && out == sizeof m0, "vnc memory stats (%zu of %zu)",
          m0.bytes_used, m0.bytes_limit);
    nrt_tensor_t *t = NULL;
    CHECK(nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 1 << 20, "big", &t) == NRT_SUCCESS, "allocate 1 MiB on vnc 0");
    CHECK(nrt_get_vnc_memory_stats(0, &m1, sizeof m1, &out) == NRT_SUCCESS && m1.bytes_used >= m0.bytes_used + (1 << 20) &&
              m1.bytes_limit == m0.bytes_limit && m1.bytes_used <= m1.bytes_limit,
          "vnc memory stats grow by the allocation (%zu -> %zu)", m0.bytes_used, m1.bytes_used);
    nrt_tensor_free(&t);
    CHECK(nrt_get_vnc_memory_stats(0, &m1, sizeof m1, &out) == NRT_SUCCESS && m1.bytes_used == m0.bytes_used,
          "vnc memory stats back after free");
    CHECK(nrt_get_vnc_memory_stats(100000, &m1, sizeof m1, &out) == NRT_INVALID, "vnc memory stats of a missing vnc -> 2");

    size_t neff_size = 0;
    void *neff = read_file(argv[1], &neff_size);
    nrt_model_t *model = NULL;
    CHECK(nrt_load(neff, neff_size, 0, -1, &model) == NRT_SUCCESS, "nrt_load on vnc 0");
    free(neff);
    nrt_model_info_t mi = {7};
    size_t mi_out = 0;
    CHECK(nrt_get_model_info(model, &mi, sizeof mi, &mi_out) == NRT_SUCCESS && mi.vnc == 0 && mi_out == sizeof mi,
          "nrt_get_model_info vnc %u", mi.vnc);
    uint32_t ic = 0;
    CHECK(nrt_get_model_instance_count(model, &ic) == NRT_SUCCESS && ic == 1, "nrt_get_model_instance_count %u", ic);
    CHECK(nrt_unload(model) == NRT_SUCCESS, "nrt_unload");

    uint32_t hid = 99;
    CHECK(nrt_host_device_id_get(0, &hid) == NRT_SUCCESS && hid == 0, "nrt_host_device_id_get(0) -> %u", hid);
    CHECK(nrt_host_device_id_get(64, &hid) == NRT_INVALID, "nrt_host_device_id_get(64) -> 2");
    uint32_t map[16], count = 16;
    CHECK(nrt_host_device_id_rid_map_get(&count, map) == NRT_SUCCESS && count >= 1 && map[0] == 0, "rid map (%u entries)", count);
    void *va = NULL;
    size_t sz = 0;
    CHECK(nrt_get_hbm_mmap_va(0, 0, &va, &sz) == NRT_INVALID, "nrt_get_hbm_mmap_va -> NRT_INVALID (not mapped)");
    char bdf[32];
    size_t len = sizeof bdf;
    CHECK(nrt_get_attached_efa_bdf(&len, bdf, &len) == NRT_FAILURE, "nrt_get_attached_efa_bdf -> NRT_FAILURE (no EFA)");

    nrt_tensor_set_t *set = NULL;
    nrt_tensor_t *got = NULL;
    CHECK(nrt_allocate_tensor_set(&set) == NRT_SUCCESS, "nrt_allocate_tensor_set");
    CHECK(nrt_get_tensor_from_tensor_set(set, "missing", &got) == NRT_FAILURE, "tensor-set lookup of a missing name -> 1");
    nrt_destroy_tensor_set(&set);
    int err = 0;
    char msg[64] = {0};
    CHECK(nrt_get_libnccl_net(&err, msg, sizeof msg) == NULL && err != 0 && msg[0] != 0, "nrt_get_libnccl_net -> NULL (%s)", msg);
    CHECK(nrt_barrier(0, 0, 1) == NRT_SUCCESS && nrt_barrier(0, 1, 2) == NRT_INVALID, "nrt_barrier: one worker only");
    float in[4] = {1, 2, 3, 4}, gathered[4] = {0};
    CHECK(nrt_all_gather(0, 0, 1, sizeof in, in, gathered) == NRT_SUCCESS && gathered[3] == 4, "nrt_all_gather of one worker");
    nrt_ucode_info uc = {{NULL, 0}, {NULL, 0}};
    CHECK(nrt_set_pool_eng_ucode(&uc) == NRT_INVALID, "nrt_set_pool_eng_ucode after nrt_init -> 2");
    nrt_close();
    return finish();
}
