/*
 * nrt/nrt_sys_trace.h — system trace capture and fetch (public libnrt ABI; see nrt/nrt.h).
 *
 * Events go to one ring buffer per NeuronCore; fetching returns them (oldest first) as a
 * JSON document (docs/profiling.md) and removes them from the rings.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nrt/nrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nrt_sys_trace_config nrt_sys_trace_config_t;

NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **options);
void nrt_sys_trace_config_set_defaults(nrt_sys_trace_config_t *options);
void nrt_sys_trace_config_free(nrt_sys_trace_config_t *options);
/* Ring capacity per NeuronCore (the oldest events are overwritten). */
void nrt_sys_trace_config_set_max_events_per_nc(nrt_sys_trace_config_t *options, uint64_t max_events_per_nc);
void nrt_sys_trace_config_set_capture_enabled_for_nc(nrt_sys_trace_config_t *options, uint32_t nc_idx, bool enabled);
NRT_STATUS nrt_sys_trace_config_set_capture_enabled_for_event_type(nrt_sys_trace_config_t *options,
                                                                  const char *event_type, bool enabled);

/* Event type names; the array and strings are malloc'd (nrt_sys_trace_free_event_types). */
NRT_STATUS nrt_sys_trace_get_event_types(const char ***event_types, size_t *count);
void nrt_sys_trace_free_event_types(const char **event_types, size_t count);
NRT_STATUS nrt_sys_trace_config_get_enabled_event_types(nrt_sys_trace_config_t *options,
                                                       const char ***event_types, size_t *count);

/* Start capturing (NULL options: the defaults) / stop and drop the rings. */
NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t *options);
NRT_STATUS nrt_sys_trace_stop(void);

typedef struct nrt_sys_trace_fetch_options nrt_sys_trace_fetch_options_t;

NRT_STATUS nrt_sys_trace_fetch_options_allocate(nrt_sys_trace_fetch_options_t **options);
void nrt_sys_trace_fetch_options_set_defaults(nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_fetch_options_free(nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_fetch_options_set_max_events_per_nc(nrt_sys_trace_fetch_options_t *options,
                                                       uint64_t max_events_per_nc);
void nrt_sys_trace_fetch_options_set_nc_idx(nrt_sys_trace_fetch_options_t *options, uint64_t nc_idx);

/* Take captured events as a NUL-terminated JSON string (*buffer, free it with
 * nrt_sys_trace_buffer_free; *written_size excludes the NUL). NULL options: everything. */
NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written_size,
                                      const nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_buffer_free(char *buffer);

#ifdef __cplusplus
}
#endif
