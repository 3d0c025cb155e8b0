/*
 * nrt/nrt_profile.h — profiling (public libnrt ABI; see nrt/nrt.h).
 *
 * neuron-vfio writes its profiles as Chrome/Perfetto JSON traces (docs/profiling.md), not
 * NTFF: that format is not public.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Profile every execution of `model` until nrt_profile_stop. */
NRT_STATUS nrt_profile_start(nrt_model_t *model, const char *filename);
/* Stop profiling and write what was recorded to `filename`. */
NRT_STATUS nrt_profile_stop(const char *filename);

/* Continuous profiling: record every execution, save the latest of a core on request. */
typedef struct nrt_profile_continuous_options nrt_profile_continuous_options_t;

NRT_STATUS nrt_profile_continuous_options_allocate(nrt_profile_continuous_options_t **options);
NRT_STATUS nrt_profile_continuous_options_free(nrt_profile_continuous_options_t *options);
NRT_STATUS nrt_profile_continuous_options_set_output_dir(nrt_profile_continuous_options_t *options,
                                                         const char *output_dir);
NRT_STATUS nrt_profile_continuous_start(nrt_profile_continuous_options_t *options);
NRT_STATUS nrt_profile_continuous_save(uint32_t vnc, nrt_profile_continuous_options_t *options);
NRT_STATUS nrt_profile_continuous_stop(void);

/* Inspect profiling configured by NEURON_RT_INSPECT_ENABLE, NEURON_RT_INSPECT_OUTPUT_DIR,
 * NEURON_RT_INSPECT_SYSTEM_PROFILE, NEURON_RT_INSPECT_DEVICE_PROFILE,
 * NEURON_RT_INSPECT_ON_FAIL. */
NRT_STATUS nrt_inspect_begin(void);
NRT_STATUS nrt_inspect_stop(void);

/* Inspect profiling configured through an options object. */
typedef struct nrt_inspect_config nrt_inspect_config_t;

NRT_STATUS nrt_inspect_config_allocate(nrt_inspect_config_t **options);
NRT_STATUS nrt_inspect_config_set_defaults(nrt_inspect_config_t *options);
NRT_STATUS nrt_inspect_config_free(nrt_inspect_config_t *options);
NRT_STATUS nrt_inspect_config_set_session_id(nrt_inspect_config_t *options, int session_id);
NRT_STATUS nrt_inspect_config_set_output_dir(nrt_inspect_config_t *options, const char *output_dir);
NRT_STATUS nrt_inspect_config_set_sys_trace_max_events_per_nc(nrt_inspect_config_t *options,
                                                              uint64_t sys_trace_max_events_per_nc);
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_nc(nrt_inspect_config_t *options, uint32_t nc_idx,
                                                         bool enabled);
NRT_STATUS nrt_inspect_config_set_capture_enabled_for_event_type_string(nrt_inspect_config_t *options,
                                                                        const char *event_type, bool enabled);
NRT_STATUS nrt_inspect_config_set_enable_inspect(nrt_inspect_config_t *options, bool enable_inspect);
NRT_STATUS nrt_inspect_config_set_enable_inspect_on_fail(nrt_inspect_config_t *options, bool enable_inspect_on_fail);
/* NULL options: the defaults. */
NRT_STATUS nrt_inspect_begin_with_options(nrt_inspect_config_t *options);

/* Activity type names ("system_profile", "device_profile", "host_memory", "cpu_util"); the
 * arrays are malloc'd, free them with nrt_inspect_config_free_activity_types. */
NRT_STATUS nrt_inspect_config_get_all_activity_types(const char ***activity_types, size_t *count);
NRT_STATUS nrt_inspect_config_get_enabled_activity_types(nrt_inspect_config_t *options,
                                                         const char ***activity_types, size_t *count);
void nrt_inspect_config_free_activity_types(const char **activity_types, size_t count);
/* Enable or disable one activity type, or "all". */
NRT_STATUS nrt_inspect_config_set_activity(nrt_inspect_config_t *options, const char *activity_type, bool enabled);

#ifdef __cplusplus
}
#endif
