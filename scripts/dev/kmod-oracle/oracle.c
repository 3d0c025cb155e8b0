/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The oracle program: drives the kmod's own functions (compiled unmodified next to this file)
 * for each operation hal performs, with the parameters hal's comparison test uses
 * (hal/tests/kmod_oracle.rs), and writes one trace per operation into <out>/<op>.trace.
 *
 *   oracle-v2 <out-dir>    (sunda)      oracle-v3 <out-dir>    (cayman)
 *   oracle-v4 <out-dir>    (mariana: built from the aws-neuronx-dkms 2.25.4.0 tree, README.md)
 *
 * Built by build.sh with the kmod's include paths: this file uses the kmod's types and
 * entry points, never its register offsets (those appear only in the traces the kmod makes).
 * The one device behaviour it supplies is a fake firmware (fake_device below) that answers
 * what the kmod waits for: a reset request is taken at once and the device is ready, a FW-IO
 * request is answered with success (in host memory for the legacy protocol, in misc RAM for
 * the new one).
 */
#include <sys/mman.h>

#include "neuron_device.h"
#include "neuron_dhal.h"
#include "neuron_ring.h"
#include "neuron_dma.h"
#include "neuron_nq.h"
#include "neuron_core.h"
#include "neuron_fw_io.h"
#include "neuron_reset.h"
#include "neuron_mempool.h"
#include "neuron_arch.h"
#include "udma/udma.h"

#if defined(ORACLE_ARCH_v2)
#define ARCH NEURON_ARCH_V2
#define PCI_ID TRN1_DEVICE_ID0
#elif defined(ORACLE_ARCH_v3)
#define ARCH NEURON_ARCH_V3
#define PCI_ID TRN2_DEVICE_ID0
#elif defined(ORACLE_ARCH_v4)
/* v4 is built from the aws-neuronx-dkms 2.25.4.0 tree (build.sh): a few declarations
 * differ from the pinned aws-neuron tree's, and its FW-IO has the new protocol too. The
 * shim's DMI product name is none of the v4 PDS or 3xlarge instance names, so the kmod
 * takes the standard platform. */
#define ARCH NEURON_ARCH_V4
#define PCI_ID TRN3_DEVICE_ID0
#define ORACLE_KMOD_2_25 1
#else
#error "build with -DORACLE_ARCH_v2, -DORACLE_ARCH_v3 or -DORACLE_ARCH_v4"
#endif

/* The parameters hal's test uses for the same operations (hal/tests/kmod_oracle.rs). */
#define QUEUE_ENGINE 1
#define QUEUE_ID 3
#define QUEUE_M2S_BASE 0x0000001234567000ULL
#define QUEUE_S2M_BASE 0x000000ABCDEF8000ULL
#define QUEUE_DESCS 256
#define PARK_ENGINE 0
#define PARK_QUEUE 2
#define DUMMY_RING_PA 0x0000004200001000ULL
#define NQ_NC 1
#define NQ_PA 0x0000000123456000ULL
#define NQ_BYTES 4096
#define SEM_NC 1
#define SEM_INDEX 5
#define EVENT_INDEX 7
#define RESET_NC_MAP 0x1
/* The host copies (ndma_memcpy on NC 0's host-transfer ring): a device-to-device and a
 * host-to-device copy of four chunks, the last a short one. The addresses are labels: the
 * fake device moves only the completion marker, and hal's test compares descriptor
 * addresses relative to these bases. */
#define COPY_BYTES (3 * 65536 + 5)
#define COPY_DEV_SRC 0x0000000000400000ULL
#define COPY_DEV_DST 0x0000000000800000ULL
#define COPY_HOST_PA 0x0000000700000000ULL
/* The FW API version the fake firmware reports: the first with the new FW-IO protocol. */
#define FW_API_VERSION 7

static struct neuron_device nd;
static struct pci_dev pdev;
static const char *out_dir;
static struct fw_io_ctx *fwio;
static bool fwio_new_protocol;
/* While a host copy runs: its completion-marker words (source, then destination). */
static volatile u32 *copy_marker;

/* ---- kmod services from files the oracle does not compile, written for the oracle ---- */

/* Device memory: a bump allocator from the address the operation asks for (mempool). */
static u64 next_device_pa;

int mc_alloc_align(struct neuron_device *ndev, enum mc_lifespan lifespan, u64 size, u64 align,
		   enum mem_location location, u32 channel, u32 region, u32 nc_id,
		   mem_alloc_category_t type, struct mem_chunk **result)
{
	(void)ndev;
	(void)type;
	struct mem_chunk *mc = kzalloc(sizeof(*mc), GFP_KERNEL);
	if (!mc)
		return -ENOMEM;
	if (align && next_device_pa % align)
		next_device_pa += align - next_device_pa % align;
	mc->pa = next_device_pa;
	mc->size = size;
	mc->va = kzalloc(size, GFP_KERNEL);
	mc->mem_location = location;
	mc->dram_channel = channel;
	mc->dram_region = region;
	mc->nc_id = nc_id;
	mc->lifespan = lifespan;
	mc->ref_count = 1;
	next_device_pa += size;
	*result = mc;
	return 0;
}

void mc_free(struct mem_chunk **mcp)
{
	if (*mcp) {
		free((*mcp)->va);
		free(*mcp);
		*mcp = NULL;
	}
}

/* Reset metrics (neuron_metrics.c): bookkeeping in nd->metrics, no device access. The
 * 2.25.4.0 tree (v4) declares the time signed. */
#ifdef ORACLE_KMOD_2_25
typedef s64 reset_ms_t;
#else
typedef uint64_t reset_ms_t;
#endif
void nmetric_set_reset_time_metrics(struct neuron_device *ndev, reset_ms_t ms, bool device_reset)
{
	(void)ndev;
	(void)ms;
	(void)device_reset;
}

void nmetric_increment_reset_failure_count(struct neuron_device *ndev, bool device_reset)
{
	(void)ndev;
	(void)device_reset;
	fprintf(stderr, "kmod-oracle: the reset failed\n");
	exit(3);
}

/* The kmod's queue reset: static in udma/udma_main.c, made global by build.sh (objcopy). */
int udma_q_reset(struct udma_q *udma_q);

/* ---- the fake firmware ---- */

/* The legacy FW-IO request and response headers: their own fields in the pinned tree, a
 * header union in the 2.25.4.0 tree. */
#ifdef ORACLE_KMOD_2_25
#define FWIO_REQ_HDR(rq) ((rq)->request_hdr.hdr)
#define FWIO_RESP_HDR(rs) ((rs)->response_hdr.hdr)
#else
#define FWIO_REQ_HDR(rq) (*(rq))
#define FWIO_RESP_HDR(rs) (*(rs))
#endif

static u64 misc_ram(void)
{
	return ndhal->ndhal_address_map.bar0_misc_ram_offset;
}

static void fake_device(int bar, u64 off, u32 value)
{
	if (copy_marker && bar == 0) {
		/* A doorbell of the host copy (the S2M one comes first): the engine runs the
		 * ring, whose last pair copies the marker word onto its destination. */
		copy_marker[1] = copy_marker[0];
		copy_marker = NULL;
		return;
	}
	if (bar != 0 || off != misc_ram() + FW_IO_REG_TRIGGER_INT_NOSEC_OFFSET || value != 1)
		return;
	u32 *reset = kshim_reg(0, misc_ram() + FW_IO_REG_RESET_OFFSET);
	if (*reset) {
		/* The firmware takes the reset request; the device is ready at once. */
		*reset = 0;
		return;
	}
#ifdef ORACLE_KMOD_2_25
	if (fwio_new_protocol) {
		/* A new-protocol request (header in misc RAM): answer success with no payload in
		 * the response header (same register as the request's first word) and clear the
		 * trigger the kmod polls. */
		u32 *hdr = kshim_reg(0, misc_ram() + FW_IO_REG_REQUEST_BASE_ADDR_HIG_OFFSET);
		union fw_io_request_hdr rq = { .reg = { .dw0 = *hdr } };
		union fw_io_response_hdr rs = { .hdr = { .sequence_number = rq.hdr.sequence_number,
							 .error_code = FW_IO_SUCCESS,
							 .size = sizeof(rs) } };
		*hdr = rs.reg.dw0;
		*kshim_reg(0, misc_ram() + FW_IO_REG_TRIGGER_INT_NOSEC_OFFSET) = 0;
		return;
	}
#endif
	if (fwio) {
		/* A FW-IO request: answer it with success and an empty-but-sized payload. */
		struct fw_io_request *rq = fwio->request;
		struct fw_io_response *rs = fwio->response;
		u32 payload = FWIO_REQ_HDR(rq).size - sizeof(*rq);
		FWIO_RESP_HDR(rs).error_code = FW_IO_SUCCESS;
		/* a u32 answer per u64 address read */
		FWIO_RESP_HDR(rs).size = sizeof(*rs) + payload / 2;
		memset(rs->data, 0, payload / 2);
		FWIO_RESP_HDR(rs).sequence_number = FWIO_REQ_HDR(rq).sequence_number;
	}
}

/* ---- one traced operation ---- */

static void begin(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void begin(const char *op, const char *fmt, ...)
{
	char params[256], path[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(params, sizeof(params), fmt, ap);
	va_end(ap);
	snprintf(path, sizeof(path), "%s/%s.trace", out_dir, op);
	kshim_trace_begin(path, op, params);
}

static void check(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "kmod-oracle: %s returned %d\n", what, ret);
		exit(3);
	}
}

static struct mem_chunk *device_chunk(u64 pa, u64 size)
{
	struct mem_chunk *mc = NULL;
	next_device_pa = pa;
	check(mc_alloc_align(&nd, MC_LIFESPAN_DEVICE, size, 0, MEM_LOC_DEVICE, 0, 0, 0, 0, &mc),
	      "mc_alloc_align");
	return mc;
}

static void engine_init(int eng)
{
	char op[64];
	snprintf(op, sizeof(op), "engine_init-e%d", eng);
	begin(op, "engine=%d", eng);
	check(ndmar_eng_init(&nd, eng), "ndmar_eng_init");
	kshim_trace_end();
}

static void queues(void)
{
	struct mem_chunk *tx = device_chunk(QUEUE_M2S_BASE, QUEUE_DESCS * sizeof(union udma_desc));
	struct mem_chunk *rx = device_chunk(QUEUE_S2M_BASE, QUEUE_DESCS * sizeof(union udma_desc));
	begin("queue_init", "engine=%d queue=%d m2s=0x%llx s2m=0x%llx descs=%d", QUEUE_ENGINE, QUEUE_ID,
	      QUEUE_M2S_BASE, QUEUE_S2M_BASE, QUEUE_DESCS);
	check(ndmar_queue_init(&nd, QUEUE_ENGINE, QUEUE_ID, QUEUE_DESCS, QUEUE_DESCS, tx, rx, NULL, 0,
			       false),
	      "ndmar_queue_init");
	kshim_trace_end();

	/* Pause: both halves, M2S first (the order ndmar quiesces a queue pair in). */
	struct udma *u = &nd.ndma_engine[QUEUE_ENGINE].udma;
	begin("queue_pause", "engine=%d queue=%d", QUEUE_ENGINE, QUEUE_ID);
	check(udma_q_pause(&u->udma_q_m2s[QUEUE_ID]), "udma_q_pause m2s");
	check(udma_q_pause(&u->udma_q_s2m[QUEUE_ID]), "udma_q_pause s2m");
	kshim_trace_end();

	/* Reset: both halves, M2S first, on the queue enabled above. udma_q_reset is static in
	 * udma_main.c (udma_q_init's first step); build.sh makes its symbol global. */
	begin("queue_reset", "engine=%d queue=%d", QUEUE_ENGINE, QUEUE_ID);
	check(udma_q_reset(&u->udma_q_m2s[QUEUE_ID]), "udma_q_reset m2s");
	check(udma_q_reset(&u->udma_q_s2m[QUEUE_ID]), "udma_q_reset s2m");
	kshim_trace_end();

	begin("engine_normal", "engine=%d", QUEUE_ENGINE);
	check(ndmar_eng_set_state(&nd, QUEUE_ENGINE, UDMA_NORMAL), "ndmar_eng_set_state");
	kshim_trace_end();
}

static void park(void)
{
	/* A process owns one queue; it exits: the kmod parks the queue on the dummy ring. */
	struct mem_chunk *tx = device_chunk(QUEUE_M2S_BASE, QUEUE_DESCS * sizeof(union udma_desc));
	struct mem_chunk *rx = device_chunk(QUEUE_S2M_BASE, QUEUE_DESCS * sizeof(union udma_desc));
	check(ndmar_queue_init(&nd, PARK_ENGINE, PARK_QUEUE, QUEUE_DESCS, QUEUE_DESCS, tx, rx, NULL, 0,
			       false),
	      "ndmar_queue_init");
	nd.ndma_q_dummy_mc = device_chunk(DUMMY_RING_PA, NDMA_QUEUE_DUMMY_RING_SIZE);
	/* Only that queue is the process's (the queue traced above was also opened by it). */
	for (int e = 0; e < NUM_DMA_ENG_PER_DEVICE; e++)
		for (int q = 0; q < DMA_MAX_Q_MAX; q++)
			nd.ndma_engine[e].queues[q].owner = 0;
	nd.ndma_engine[PARK_ENGINE].queues[PARK_QUEUE].owner = task_tgid_nr(current);
	begin("park", "engine=%d queue=%d dummy=0x%llx descs=%d", PARK_ENGINE, PARK_QUEUE, DUMMY_RING_PA,
	      NDMA_QUEUE_DUMMY_RING_DESC_COUNT);
	ndmar_handle_process_exit(&nd, task_tgid_nr(current));
	kshim_trace_end();
}

static void nq(const char *name, u32 type, u8 engine)
{
	char op[64];
	struct mem_chunk *mc = NULL;
	u64 mmap_offset = 0;
	snprintf(op, sizeof(op), "nq_init-%s", name);
	next_device_pa = NQ_PA;
	begin(op, "nc=%d type=%u engine=%u addr=0x%llx bytes=%d", NQ_NC, type, engine, NQ_PA, NQ_BYTES);
	check(nnq_init(&nd, NQ_NC, engine, type, NQ_BYTES, 0, 0, 0, true, &mc, &mmap_offset), "nnq_init");
	kshim_trace_end();
	snprintf(op, sizeof(op), "nq_halt-%s", name);
	begin(op, "nc=%d type=%u engine=%u", NQ_NC, type, engine);
	nnq_destroy_nc(&nd, NQ_NC);
	kshim_trace_end();
}

static void resets(void)
{
	begin("nc_reset", "nc_map=0x%x", RESET_NC_MAP);
	check(ndhal->ndhal_reset.nr_initiate_reset(&nd, RESET_NC_MAP), "nr_initiate_reset");
	check(ndhal->ndhal_reset.nr_wait_for_reset_completion(&nd), "nr_wait_for_reset_completion");
	kshim_trace_end();
	begin("device_reset", "nc_map=device");
	check(ndhal->ndhal_reset.nr_initiate_reset(&nd, NEURON_NC_MAP_DEVICE), "nr_initiate_reset");
	check(ndhal->ndhal_reset.nr_wait_for_reset_completion(&nd), "nr_wait_for_reset_completion");
	kshim_trace_end();
}

static void fw_io(void)
{
	fwio = fw_io_setup(nd.npdev.bar0, nd.npdev.bar0_size, nd.npdev.bar2, nd.npdev.bar2_size);
	if (!fwio) {
		fprintf(stderr, "kmod-oracle: fw_io_setup failed\n");
		exit(3);
	}
#ifdef ORACLE_KMOD_2_25
	/* One request in the new protocol (payload and header in misc RAM), on the fresh
	 * context: the power profile, 8 bytes of zeros. */
	fwio_new_protocol = true;
	begin("fwio_power_profile", "cmd=set_power_profile profile=0 api_version=%d seq_before=%u",
	      FW_API_VERSION, fwio->next_seq_num);
	check(fw_io_set_power_profile(fwio, 0), "fw_io_set_power_profile");
	kshim_trace_end();
	fwio_new_protocol = false;
#endif
	/* One register read through the mailbox (FW_IO_CMD_READ). */
	u64 addr = 0;
	u32 value = 0;
	begin("fwio_read", "cmd=read addresses=1 request=0x%llx response=0x%llx",
	      (unsigned long long)fwio->request_addr, (unsigned long long)fwio->response_addr);
	check(fw_io_read(fwio, &addr, &value, 1), "fw_io_read");
	kshim_trace_end();
}

static void semaphores(void)
{
	begin("sem_reset", "nc=%d sem=%d value=0", SEM_NC, SEM_INDEX);
	check(nc_semaphore_write(&nd, SEM_NC, SEM_INDEX, 0), "nc_semaphore_write");
	kshim_trace_end();
	begin("sem_inc", "nc=%d sem=%d value=1", SEM_NC, SEM_INDEX);
	check(nc_semaphore_increment(&nd, SEM_NC, SEM_INDEX, 1), "nc_semaphore_increment");
	kshim_trace_end();
	begin("sem_dec", "nc=%d sem=%d value=1", SEM_NC, SEM_INDEX);
	check(nc_semaphore_decrement(&nd, SEM_NC, SEM_INDEX, 1), "nc_semaphore_decrement");
	kshim_trace_end();
	begin("event_reset", "nc=%d event=%d value=0", SEM_NC, EVENT_INDEX);
	check(nc_event_set(&nd, SEM_NC, EVENT_INDEX, 0), "nc_event_set");
	kshim_trace_end();
}

/* Every descriptor pair the kmod wrote into a fresh ring: `M <half> <index> <w0> <w1> <addr>`. */
static void dump_ring(struct ndma_ring *ring)
{
	const union udma_desc *tx = ring->tx.ptr, *rx = ring->rx.ptr;
	for (u32 i = 0; i < ring->size / sizeof(union udma_desc) && tx[i].tx.len_ctrl; i++) {
		kshim_trace_note("M m2s %u 0x%08x 0x%08x 0x%016llx", i, tx[i].tx.len_ctrl, tx[i].tx.meta_ctrl,
				 (unsigned long long)tx[i].tx.buf_ptr);
		kshim_trace_note("M s2m %u 0x%08x 0x%08x 0x%016llx", i, rx[i].rx.len_ctrl, rx[i].rx.buf2_ptr_lo,
				 (unsigned long long)rx[i].rx.buf1_ptr);
	}
}

/* One host copy on NC 0's host-transfer ring (fresh for each copy): ndma_memcpy, the path of
 * MEM_BUF_COPY64 / MEM_COPY / MEMSET64. The trace holds its register accesses and then the
 * descriptors it wrote. */
static void memcpy_op(const char *op, u64 src, u64 dst)
{
	const int nc = 0;
	const int eng_id = ndhal->ndhal_ndmar.ndmar_get_h2t_eng_id(&nd, nc);
#ifdef ORACLE_KMOD_2_25
	const int qid = ndhal->ndhal_ndmar.ndmar_get_h2t_def_qid(nc);
#else
	const int qid = ndhal->ndhal_ndmar.ndmar_get_h2t_qid(nc);
#endif
	struct ndma_ring *ring = &nd.ndma_engine[eng_id].queues[qid].ring_info;
	nd.dmar_init_done[nc] = false;
	check(ndmar_init_ncs(&nd, 1 << nc), "ndmar_init_ncs");
	u32 *marker = (u32 *)ring->h2t_completion.ptr + 2 * NEURON_DMA_H2T_CTX_HANDLE_SYNC;
	begin(op, "engine=%d queue=%d src=0x%llx dst=0x%llx size=%d marker=0x%llx", eng_id, qid,
	      (unsigned long long)src, (unsigned long long)dst, COPY_BYTES,
	      (unsigned long long)(ring->h2t_completion.addr + 2 * sizeof(u32) * NEURON_DMA_H2T_CTX_HANDLE_SYNC));
	copy_marker = marker;
	check(ndma_memcpy(&nd, nc, src, dst, COPY_BYTES), "ndma_memcpy");
	dump_ring(ring);
	kshim_trace_end();
}

static void copies(void)
{
	memcpy_op("memcpy_d2d", COPY_DEV_SRC, COPY_DEV_DST);
	memcpy_op("memcpy_h2d", COPY_HOST_PA | ndhal->ndhal_address_map.pci_host_base, COPY_DEV_DST);
}

static void *bar_memory(u64 size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <out-dir>\n", argv[0]);
		return 1;
	}
	out_dir = argv[1];
	narch_init(ARCH, 0);
	check(neuron_dhal_init(PCI_ID), "neuron_dhal_init");

	pdev.vendor = AMZN_VENDOR_ID;
	pdev.device = PCI_ID;
	nd.pdev = &pdev;
	nd.npdev.bar0_size = 1ULL << 32;
	nd.npdev.bar0 = bar_memory(nd.npdev.bar0_size);
	nd.npdev.bar2_size = 1ULL << 24;
	nd.npdev.bar2 = bar_memory(nd.npdev.bar2_size);
	nd.npdev.bar4_size = 1ULL << 24;
	nd.npdev.bar4 = bar_memory(nd.npdev.bar4_size);
	kshim_bar(0, nd.npdev.bar0, nd.npdev.bar0_size);
	kshim_bar(2, nd.npdev.bar2, nd.npdev.bar2_size);
	kshim_bar(4, nd.npdev.bar4, nd.npdev.bar4_size);
	kshim_set_device(fake_device);
#ifdef ORACLE_KMOD_2_25
	/* The firmware's API version, in misc RAM from the start (not a traced access). */
	*kshim_reg(0, misc_ram() + FW_IO_REG_API_VERSION_OFFSET) = FW_API_VERSION;
#endif
	ndmar_preinit(&nd);

	/* Engines: the first two of NC 0 and NC 0's host-facing engine. */
	int h2t = (int)ndhal->ndhal_ndmar.ndmar_get_h2t_eng_id(&nd, 0);
	engine_init(0);
	engine_init(1);
	engine_init(h2t);
	queues();
	park();
	nq("notify", NQ_TYPE_NOTIFY, 0);
	nq("event", NQ_TYPE_EVENT, 0);
	nq("error", NQ_TYPE_ERROR, 0);
	resets();
	fw_io();
	semaphores();
	copies();
	return 0;
}
