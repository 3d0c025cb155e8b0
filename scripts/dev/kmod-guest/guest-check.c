// SPDX-License-Identifier: Apache-2.0
// guest-check: what libnrt does through the vendor kmod's /dev/neuron0, in a QEMU guest
// against the served simulator (scripts/dev/kmod-guest/run.sh, docs/kmod-guest.md).
//
// Ours, not derived from the kmod: the ioctl numbers and argument layouts come from including
// the kmod checkout's neuron_ioctl.h at build time (run.sh compiles this file against it; the
// header is GPL-2.0 and never enters this repository). The device facts below (NCs, HBM
// channels, engines) are the project's csr-maps/arch/*.toml; the UDMA descriptor layout is
// csr-maps' `udma_desc` format.
//
//   guest-check ARCH          # sunda | cayman | mariana
//
// One line per check: `NTEST ok NAME DETAIL` or `NTEST FAIL NAME DETAIL`. Before each group of
// checks the program prints `KMOD-GUEST-MARK NAME` and waits for a line on stdin: run.sh marks
// the served device's MMIO trace there, so each group's register traffic is delimited.

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "neuron_ioctl.h"

// ---- device facts (csr-maps/arch/*.toml) --------------------------------------------------
struct arch {
	const char *name;
	uint32_t kmod_arch;     // DEVICE_BASIC_INFO.architecture (the kmod's enum neuron_arch)
	uint32_t ncs;           // [counts] ncs
	uint32_t hbm;           // [counts] hbm_stacks (the kmod's dram_channels)
	uint32_t dma_per_nc;    // [counts] dma_engines_per_nc
	uint64_t host_base;     // [consts] host_base: device address of host memory = pa | this
};
static const struct arch arches[] = {
	{ "sunda", 2, 2, 2, 16, 0x100000000000ull },
	{ "cayman", 3, 8, 4, 16, 0x400000000000ull },
	// The 2.25.4.0 kmod reports v4 as NEURON_ARCH_V4 (its enum gains 4).
	{ "mariana", 4, 8, 4, 16, 0x400000000000ull },
};
static const struct arch *A;

// ---- reporting ------------------------------------------------------------------------------
static int n_ok, n_fail;
static void check(int ok, const char *name, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	printf("NTEST %s %s %s\n", ok ? "ok" : "FAIL", name, buf);
	fflush(stdout);
	if (ok)
		n_ok++;
	else
		n_fail++;
}

// A group of checks starts: run.sh marks the MMIO trace, then answers with a line.
static void mark(const char *name)
{
	char line[64];
	printf("KMOD-GUEST-MARK %s\n", name);
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		clearerr(stdin);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int fd = -1;
static int io(unsigned long cmd, void *arg)
{
	int r = ioctl(fd, cmd, arg);
	return r < 0 ? -errno : r;
}

// ---- memory helpers ---------------------------------------------------------------------
struct mem {
	__u64 h;   // mem handle
	__u64 pa;  // MEM_GET_PA
	uint64_t size;
	int host;
};

static int mem_alloc(struct mem *m, uint64_t size, uint64_t align, int host, uint32_t chan, uint32_t nc)
{
	struct neuron_ioctl_mem_alloc_v2 a = { 0 };
	memset(m, 0, sizeof *m);
	a.size = size;
	a.align = align;
	a.host_memory = host;
	a.dram_channel = chan;
	a.nc_id = nc;
	a.mem_handle = &m->h;
	int r = io(NEURON_IOCTL_MEM_ALLOC_V2, &a);
	if (r)
		return r;
	struct neuron_ioctl_mem_get_pa p = { .mem_handle = m->h, .pa = &m->pa };
	r = io(NEURON_IOCTL_MEM_GET_PA, &p);
	m->size = size;
	m->host = host;
	return r;
}

static int mem_free(struct mem *m)
{
	struct neuron_ioctl_mem_free f = { .mem_handle = m->h };
	return io(NEURON_IOCTL_MEM_FREE, &f);
}

static int buf_copy(struct mem *m, void *buf, uint64_t size, uint64_t off, int to_mem)
{
	struct neuron_ioctl_mem_buf_copy64 c = { .mem_handle = m->h, .buffer = buf, .size = size,
		.offset = off, .copy_to_mem_handle = to_mem };
	return io(NEURON_IOCTL_MEM_BUF_COPY64, &c);
}

static void pattern(uint8_t *p, uint64_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (uint64_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (uint8_t)(x >> 16);
	}
}

// The first differing offset, or -1.
static int64_t differ(const uint8_t *a, const uint8_t *b, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (int64_t)i;
	return -1;
}

// ---- the checks -------------------------------------------------------------------------------
static void check_info(void)
{
	mark("info");
	struct neuron_ioctl_compatible_version v = { 0 };
	int r = io(NEURON_IOCTL_COMPATIBLE_VERSION, &v);
	check(r == 0 && v.min > 0 && v.min <= v.max, "compatible_version", "r=%d min=%u max=%u", r, v.min, v.max);

	struct neuron_ioctl_device_basic_info b = { 0 };
	r = io(NEURON_IOCTL_DEVICE_BASIC_INFO, &b);
	check(r == 0 && b.architecture == A->kmod_arch, "device_basic_info", "r=%d architecture=%u (want %u) revision=%u", r,
	      b.architecture, A->kmod_arch, b.revision);

	struct neuron_ioctl_device_info d = { 0 };
	r = io(NEURON_IOCTL_DEVICE_INFO, &d);
	check(r == 0 && d.architecture == A->kmod_arch && d.bar_size[0] > 0, "device_info",
	      "r=%d architecture=%u connected=%u bar0 %#" PRIx64 "+%#" PRIx64 " bar1 %#" PRIx64 "+%#" PRIx64, r,
	      d.architecture, d.connected_device_count, (uint64_t)d.bar_address[0], (uint64_t)d.bar_size[0],
	      (uint64_t)d.bar_address[1], (uint64_t)d.bar_size[1]);

	struct neuron_ioctl_device_driver_info di = { 0 };
	r = io(NEURON_IOCTL_DRIVER_INFO_GET, &di);
	check(r == 0 && di.architecture == A->kmod_arch && di.size == sizeof di, "driver_info_get",
	      "r=%d version=%u size=%u features=%#" PRIx64, r, di.version, di.size, (uint64_t)di.feature_flags1);

	struct neuron_ioctl_device_bdf bdf = { 0 };
	r = io(NEURON_IOCTL_DEVICE_BDF, &bdf);
	check(r == 0, "device_bdf", "r=%d %02x:%02x.%x", r, bdf.bus_number, bdf.slot, bdf.func);
}

static void check_mem(void)
{
	mark("mem-alloc");
	// Host memory, several sizes and alignments.
	static const uint64_t sizes[] = { 1, 4096, 65537, 1 << 20 };
	for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		struct mem m;
		int r = mem_alloc(&m, sizes[i], 0, 1, 0, 0);
		int fr = r ? 0 : mem_free(&m);
		check(r == 0 && m.pa != 0 && fr == 0, "mem_alloc_host", "size=%" PRIu64 " r=%d pa=%#" PRIx64 " free=%d", sizes[i],
		      r, m.pa, fr);
	}
	// Device memory on every DRAM channel, aligned and not; the channel past the last refused.
	for (uint32_t ch = 0; ch < A->hbm; ch++) {
		static const uint64_t al[] = { 0, 4096, 1 << 20 };
		for (unsigned i = 0; i < 3; i++) {
			struct mem m;
			uint64_t size = 12345 + i * 4096;
			int r = mem_alloc(&m, size, al[i], 0, ch, 0);
			int aligned = al[i] == 0 || (m.pa % al[i]) == 0;
			int fr = r ? 0 : mem_free(&m);
			check(r == 0 && aligned && fr == 0, "mem_alloc_device",
			      "channel=%u size=%" PRIu64 " align=%" PRIu64 " r=%d pa=%#" PRIx64 " free=%d", ch, size, al[i], r, m.pa, fr);
		}
	}
	struct mem m;
	int r = mem_alloc(&m, 4096, 0, 0, A->hbm, 0);
	if (r == 0)
		mem_free(&m);
	check(r != 0, "mem_alloc_device_bad_channel", "channel=%u r=%d (refused as it must be)", A->hbm, r);

	// The other allocation forms: MEM_ALLOC (v1) and MEM_ALLOC_V2MT64 (with a memory type).
	{
		__u64 h = 0, pa = 0;
		struct neuron_ioctl_mem_alloc a1 = { .size = 4096, .host_memory = 0, .dram_channel = A->hbm - 1, .mem_handle = &h };
		r = io(NEURON_IOCTL_MEM_ALLOC, &a1);
		struct neuron_ioctl_mem_get_pa gp = { .mem_handle = h, .pa = &pa };
		int pr = r ? -1 : io(NEURON_IOCTL_MEM_GET_PA, &gp);
		struct neuron_ioctl_mem_free f = { .mem_handle = h };
		int fr = r ? -1 : io(NEURON_IOCTL_MEM_FREE, &f);
		check(r == 0 && pr == 0 && fr == 0, "mem_alloc_v1", "device channel %u r=%d pa=%#llx free=%d", A->hbm - 1, r, (unsigned long long)pa, fr);
		struct neuron_ioctl_mem_alloc_v2_mem_type64 a2 = { .size = 8192, .align = 4096, .host_memory = 0, .dram_channel = 0,
			.mem_type = NEURON_MEMALLOC_TYPE_TENSORS_DEVICE, .mem_handle = &h };
		r = io(NEURON_IOCTL_MEM_ALLOC_V2MT64, &a2);
		struct neuron_ioctl_mem_get_extended_info xi = { .mem_handle = h, .version = 1 };
		pr = r ? -1 : io(NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &xi);
		f.mem_handle = h;
		fr = r ? -1 : io(NEURON_IOCTL_MEM_FREE, &f);
		check(r == 0 && pr == 0 && xi.size == 8192 && xi.host_memory == 0 && xi.pa % 4096 == 0 && fr == 0, "mem_alloc_v2mt64",
		      "tensors, device, 8 KiB aligned 4 KiB: r=%d pa=%#llx size=%llu free=%d", r, (unsigned long long)xi.pa,
		      (unsigned long long)xi.size, fr);
	}

	// MEM_GET_EXTENDED_INFO agrees with MEM_GET_PA.
	r = mem_alloc(&m, 8192, 0, 1, 0, 0);
	struct neuron_ioctl_mem_get_extended_info x = { .mem_handle = m.h, .version = 1 };
	int xr = io(NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &x);
	check(r == 0 && xr == 0 && x.host_memory == 1 && x.size == 8192 && x.pa == (m.pa | A->host_base) &&
		      x.mmap_offset == m.pa,
	      "mem_get_extended_info", "r=%d/%d host=%u size=%" PRIu64 " pa=%#" PRIx64 " (GET_PA %#" PRIx64 ") mmap_offset=%#" PRIx64,
	      r, xr, x.host_memory, (uint64_t)x.size, (uint64_t)x.pa, m.pa, (uint64_t)x.mmap_offset);
	mem_free(&m);
	// A freed handle is refused.
	r = mem_free(&m);
	check(r != 0, "mem_free_twice", "r=%d", r);
}

// MEM_BUF_COPY64 both ways: host chunks (the kmod copies) and device chunks (the kmod DMAs
// through its H2T queue), 1 byte to several MiB, odd offsets.
static void check_buf_copy(void)
{
	static const struct { uint64_t size, off; } cases[] = {
		{ 1, 0 }, { 1, 4097 }, { 3, 1 }, { 4095, 3 }, { 65536, 0 }, { 65537, 7 }, { 3 * 1048576 + 5, 11 },
	};
	const uint64_t chunk = 4 << 20;
	uint8_t *in = malloc(chunk), *out = malloc(chunk);
	for (int host = 1; host >= 0; host--) {
		mark(host ? "buf-copy-host" : "buf-copy-device");
		for (uint32_t ch = 0; ch < (host ? 1 : A->hbm); ch++) {
			struct mem m;
			int r = mem_alloc(&m, chunk, 0, host, ch, 0);
			if (r) {
				check(0, host ? "mem_buf_copy_host" : "mem_buf_copy_device", "alloc channel %u: r=%d", ch, r);
				continue;
			}
			for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
				uint64_t n = cases[i].size, off = cases[i].off;
				// Device copies of the large sizes once (channel 0): each is many DMAs.
				if (!host && ch > 0 && n > 65537)
					continue;
				pattern(in, n, (uint32_t)(i * 7 + ch + host));
				memset(out, 0xa5, n);
				double t = now();
				int w = buf_copy(&m, in, n, off, 1);
				int rr = w ? -1 : buf_copy(&m, out, n, off, 0);
				int64_t d = (w || rr) ? -2 : differ(in, out, n);
				check(d == -1, host ? "mem_buf_copy_host" : "mem_buf_copy_device",
				      "channel=%u size=%" PRIu64 " offset=%" PRIu64 " write=%d read=%d first_diff=%" PRId64 " (%.2fs)", ch, n, off,
				      w, rr, d, now() - t);
				if (!host && (w || rr))
					break; // the kmod's DMA timed out: the others would too (each waits)
			}
			mem_free(&m);
		}
	}
	free(in);
	free(out);
}

// MEM_COPY host->device, device->host, device->device (the kmod's own DMA), MEMSET64.
static void check_mem_copy(void)
{
	mark("mem-copy");
	const uint64_t n = 200003;
	struct mem h1, h2, d1, d2;
	int r = mem_alloc(&h1, 1 << 20, 0, 1, 0, 0) | mem_alloc(&h2, 1 << 20, 0, 1, 0, 0) |
		mem_alloc(&d1, 1 << 20, 0, 0, 0, 0) | mem_alloc(&d2, 1 << 20, 0, 0, A->hbm - 1, 0);
	if (r) {
		check(0, "mem_copy", "alloc r=%d", r);
		return;
	}
	uint8_t *in = malloc(n), *out = malloc(n);
	pattern(in, n, 42);
	buf_copy(&h1, in, n, 0, 1);
	struct { const char *name; struct mem *s, *d; uint64_t so, dof; } steps[] = {
		{ "mem_copy_h2d", &h1, &d1, 0, 13 },
		{ "mem_copy_d2d", &d1, &d2, 13, 5 },
		{ "mem_copy_d2h", &d2, &h2, 5, 1 },
	};
	int broken = 0;
	for (unsigned i = 0; i < 3; i++) {
		struct neuron_ioctl_mem_copy64 c = { .src_mem_handle = steps[i].s->h, .dst_mem_handle = steps[i].d->h,
			.size = n, .src_offset = steps[i].so, .dst_offset = steps[i].dof };
		double t = now();
		r = broken ? -1 : io(NEURON_IOCTL_MEM_COPY64, &c);
		check(r == 0, steps[i].name, "size=%" PRIu64 " src_off=%" PRIu64 " dst_off=%" PRIu64 " r=%d (%.2fs)", n, steps[i].so,
		      steps[i].dof, r, now() - t);
		broken |= r != 0;
	}
	memset(out, 0, n);
	r = buf_copy(&h2, out, n, 1, 0);
	int64_t d = r ? -2 : differ(in, out, n);
	check(!broken && d == -1, "mem_copy_roundtrip", "host->dev->dev->host first_diff=%" PRId64, d);

	// MEMSET64 of a device range at an odd offset, read back by the kmod (D2H).
	struct neuron_ioctl_memset64 s = { .mem_handle = d1.h, .offset = 3, .value = 0x5a, .size = 70001 };
	double t = now();
	r = io(NEURON_IOCTL_MEMSET64, &s);
	check(r == 0, "memset64_device", "offset=3 size=70001 value=0x5a r=%d (%.2fs)", r, now() - t);
	if (r == 0) {
		uint8_t *b = malloc(70007);
		int rr = buf_copy(&d1, b, 70007, 0, 0);
		int good = rr == 0;
		for (uint64_t i = 3; good && i < 70004; i++)
			good = b[i] == 0x5a;
		check(good, "memset64_device_data", "read=%d", rr);
		free(b);
	}
	// MEMSET64 of host memory.
	s.mem_handle = h2.h;
	r = io(NEURON_IOCTL_MEMSET64, &s);
	memset(out, 0, 70007);
	buf_copy(&h2, out, 70007, 0, 0);
	int good = r == 0;
	for (uint64_t i = 3; good && i < 70004; i++)
		good = out[i] == 0x5a;
	check(good, "memset64_host", "r=%d", r);
	// MEM_COPY_ASYNC64: h1 -> d1 (no previous transfer), d1 -> h2 waiting on the first after
	// starting, then MEM_COPY_ASYNC_WAIT on the second's handle.
	pattern(in, n, 43);
	buf_copy(&h1, in, n, 0, 1);
	struct neuron_ioctl_mem_copy_async64 a1 = { .src_mem_handle = h1.h, .dst_mem_handle = d1.h, .size = n, .src_offset = 0,
		.dst_offset = 7, .host_prefetch_addr = 0, .pwait_handle = (__u32)NEURON_DMA_H2T_CTX_HANDLE_NONE };
	t = now();
	r = io(NEURON_IOCTL_MEM_COPY_ASYNC64, &a1);
	struct neuron_ioctl_mem_copy_async64 a2 = { .src_mem_handle = d1.h, .dst_mem_handle = h2.h, .size = n, .src_offset = 7,
		.dst_offset = 2, .host_prefetch_addr = 0, .pwait_handle = a1.wait_handle };
	int r2 = r ? -1 : io(NEURON_IOCTL_MEM_COPY_ASYNC64, &a2);
	struct neuron_ioctl_mem_copy_async_wait aw = { .src_mem_handle = d1.h, .dst_mem_handle = h2.h, .pwait_handle = a2.wait_handle };
	int rw = r2 ? -1 : io(NEURON_IOCTL_MEM_COPY_ASYNC_WAIT, &aw);
	memset(out, 0, n);
	buf_copy(&h2, out, n, 2, 0);
	d = (r || r2 || rw) ? -2 : differ(in, out, n);
	check(d == -1, "mem_copy_async", "h2d then d2h (waiting on the first), wait: r=%d/%d/%d handles %u,%u first_diff=%" PRId64 " (%.2fs)", r,
	      r2, rw, a1.wait_handle, a2.wait_handle, d, now() - t);
	// MEM_BUF_ZEROCOPY64: the user buffer's pages DMAed to and from a device chunk. The 2.25
	// header (mariana's tree) gives it its own argument (copy64zc: a BAR4 write threshold and the
	// H2T queue, -1 = the default); 2.24's takes mem_buf_copy64.
	pattern(in, 65536 + 3, 44);
#ifdef NEURON_IOCTL_MEM_BUF_ZEROCOPY64_BATCHES
	struct neuron_ioctl_mem_buf_copy64zc z = { .mem_handle = d2.h, .buffer = in, .size = 65536 + 3, .offset = 9,
		.is_copy_to_device = 1, .bar4_wr_threshold = 0, .h2t_qid = -1 };
#define ZC_TO_DEVICE(z, v) ((z).is_copy_to_device = (v))
#else
	struct neuron_ioctl_mem_buf_copy64 z = { .mem_handle = d2.h, .buffer = in, .size = 65536 + 3, .offset = 9, .copy_to_mem_handle = 1 };
#define ZC_TO_DEVICE(z, v) ((z).copy_to_mem_handle = (v))
#endif
	r = io(NEURON_IOCTL_MEM_BUF_ZEROCOPY64, &z);
	memset(out, 0, 65536 + 3);
	z.buffer = out;
	ZC_TO_DEVICE(z, 0);
	r2 = r ? -1 : io(NEURON_IOCTL_MEM_BUF_ZEROCOPY64, &z);
	d = (r || r2) ? -2 : differ(in, out, 65536 + 3);
	check(d == -1, "mem_buf_zerocopy64", "65539 bytes at offset 9 of a device chunk, to and from user pages: r=%d/%d first_diff=%" PRId64, r, r2, d);
	mem_free(&h1);
	mem_free(&h2);
	mem_free(&d1);
	mem_free(&d2);
	free(in);
	free(out);
}

// mmap of memory chunks (host: the chunk's pages; device: through BAR4) and of the BAR regions
// the kmod allows (RESOURCE_MMAP_INFO: the NCs' semaphore/event windows).
static void check_mmap(void)
{
	mark("mmap");
	struct mem m;
	long pg = sysconf(_SC_PAGESIZE);
	int r = mem_alloc(&m, 4 * pg, 0, 1, 0, 0);
	void *p = r ? MAP_FAILED : mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)m.pa);
	if (p == MAP_FAILED) {
		check(0, "mmap_host_chunk", "alloc r=%d mmap errno=%d", r, errno);
	} else {
		uint8_t in[777], out[777];
		pattern(in, sizeof in, 5);
		memcpy((uint8_t *)p + 1001, in, sizeof in);
		int rr = buf_copy(&m, out, sizeof out, 1001, 0);
		int64_t d = rr ? -2 : differ(in, out, sizeof in);
		pattern(in, sizeof in, 6);
		int w = buf_copy(&m, in, sizeof in, 3 * pg + 5, 1);
		int64_t d2 = w ? -2 : differ(in, (uint8_t *)p + 3 * pg + 5, sizeof in);
		check(d == -1 && d2 == -1, "mmap_host_chunk", "offset=%#" PRIx64 " mmap->ioctl first_diff=%" PRId64 " ioctl->mmap first_diff=%" PRId64,
		      m.pa, d, d2);
		munmap(p, 4 * pg);
	}
	mem_free(&m);

	// Device memory: mmap goes through BAR4; data written there is what the kmod reads by DMA.
	r = mem_alloc(&m, 2 * pg, pg, 0, 0, 0);
	p = r ? MAP_FAILED : mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)m.pa);
	if (p == MAP_FAILED) {
		check(0, "mmap_device_chunk", "alloc r=%d pa=%#" PRIx64 " mmap errno=%d", r, m.pa, errno);
	} else {
		volatile uint32_t *w = p;
		for (int i = 0; i < 64; i++)
			w[i] = 0xc0de0000u + i;
		int good = 1;
		for (int i = 0; i < 64; i++)
			good &= w[i] == 0xc0de0000u + i;
		check(good, "mmap_device_chunk", "pa=%#" PRIx64 " write/read back through BAR4: %s", m.pa, good ? "same" : "differs");
		uint32_t back[64] = { 0 };
		int rr = buf_copy(&m, back, sizeof back, 0, 0);
		int same = rr == 0;
		for (int i = 0; same && i < 64; i++)
			same = back[i] == 0xc0de0000u + i;
		check(same, "mmap_device_chunk_dma", "BAR4 writes read by the kmod's DMA: read=%d %s", rr, same ? "same" : "differs");
		munmap(p, 2 * pg);
	}
	if (r == 0)
		mem_free(&m);

	// The BAR0 regions the kmod's table allows: each NC's semaphore window.
	for (uint32_t nc = 0; nc < A->ncs; nc++) {
		struct neuron_ioctl_resource_mmap_info ri = { .block = NEURON_DM_BLOCK_TPB, .block_id = nc,
			.resource = NEURON_DM_RESOURCE_SEMAPHORE };
		r = io(NEURON_IOCTL_RESOURCE_MMAP_INFO, &ri);
		if (r) {
			check(0, "mmap_tpb_semaphores", "nc=%u RESOURCE_MMAP_INFO r=%d", nc, r);
			continue;
		}
		p = mmap(NULL, ri.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)ri.offset);
		if (p == MAP_FAILED) {
			check(0, "mmap_tpb_semaphores", "nc=%u offset=%#" PRIx64 " size=%#" PRIx64 " errno=%d", nc, (uint64_t)ri.offset,
			      (uint64_t)ri.size, errno);
			continue;
		}
		// The window's layout (the kmod's v2/v3/v4 address_map.h, MMAP_NC_*_OFFSET from the
		// window's start): events at 0x0, semaphore read 0x1000, set 0x1400, increment 0x1800,
		// decrement 0x1c00, 4 bytes per index.
		volatile uint32_t *w = p;
		struct neuron_ioctl_semaphore s = { .nc_id = nc, .semaphore_index = 7, .value = 0x1234 + nc };
		io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
		uint32_t rd = w[(0x1000 >> 2) + 7];
		w[(0x1400 >> 2) + 7] = 40;
		w[(0x1800 >> 2) + 7] = 3;
		w[(0x1c00 >> 2) + 7] = 1;
		s.value = 0;
		io(NEURON_IOCTL_SEMAPHORE_READ, &s);
		uint32_t after = s.value;
		struct neuron_ioctl_semaphore e = { .nc_id = nc, .semaphore_index = 5, .value = 1 };
		io(NEURON_IOCTL_EVENT_SET, &e);
		uint32_t ev = w[5];
		w[5] = 0;
		e.value = 9;
		io(NEURON_IOCTL_EVENT_GET, &e);
		check(rd == 0x1234 + nc && after == 42 && ev == 1 && e.value == 0, "mmap_tpb_semaphores",
		      "nc=%u offset=%#" PRIx64 " size=%#" PRIx64 ": sem 7 written by ioctl reads %#x in the mapping; set 40 +3 -1 through it reads %u by ioctl; event 5 set by ioctl reads %u, cleared through it reads %u",
		      nc, (uint64_t)ri.offset, (uint64_t)ri.size, rd, after, ev, e.value);
		s.value = 0;
		io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
		munmap(p, ri.size);
	}
}

static void check_sem_events(void)
{
	mark("semaphores-events");
	static const uint32_t idx[] = { 0, 1, 127, 255 };
	for (uint32_t nc = 0; nc < A->ncs; nc++) {
		int good = 1;
		char why[128] = "";
		for (unsigned i = 0; i < 4 && good; i++) {
			struct neuron_ioctl_semaphore s = { .nc_id = nc, .semaphore_index = idx[i], .value = 100 + i };
			int r = io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
			s.value = 0;
			r |= io(NEURON_IOCTL_SEMAPHORE_READ, &s);
			uint32_t a = s.value;
			s.value = 5;
			r |= io(NEURON_IOCTL_SEMAPHORE_INCREMENT, &s);
			s.value = 0;
			r |= io(NEURON_IOCTL_SEMAPHORE_READ, &s);
			uint32_t b = s.value;
			s.value = 3;
			r |= io(NEURON_IOCTL_SEMAPHORE_DECREMENT, &s);
			s.value = 0;
			r |= io(NEURON_IOCTL_SEMAPHORE_READ, &s);
			uint32_t c = s.value;
			s.value = 0;
			r |= io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
			if (r || a != 100 + i || b != 105 + i || c != 102 + i) {
				good = 0;
				snprintf(why, sizeof why, "sem %u: r=%d write %u read %u, +5 read %u, -3 read %u", idx[i], r, 100 + i, a, b, c);
			}
		}
		check(good, "semaphores", "nc=%u indices 0,1,127,255 write/read/increment/decrement %s", nc, good ? "as written" : why);
		good = 1;
		for (unsigned i = 0; i < 4 && good; i++) {
			struct neuron_ioctl_semaphore e = { .nc_id = nc, .semaphore_index = idx[i], .value = 1 };
			int r = io(NEURON_IOCTL_EVENT_SET, &e);
			e.value = 7;
			r |= io(NEURON_IOCTL_EVENT_GET, &e);
			uint32_t a = e.value;
			e.value = 0;
			r |= io(NEURON_IOCTL_EVENT_SET, &e);
			e.value = 7;
			r |= io(NEURON_IOCTL_EVENT_GET, &e);
			if (r || a != 1 || e.value != 0) {
				good = 0;
				snprintf(why, sizeof why, "event %u: r=%d set 1 read %u, set 0 read %u", idx[i], r, a, e.value);
			}
		}
		check(good, "events", "nc=%u indices 0,1,127,255 set/get %s", nc, good ? "as set" : why);
	}
	struct neuron_ioctl_semaphore s = { .nc_id = A->ncs, .semaphore_index = 0 };
	int r = io(NEURON_IOCTL_SEMAPHORE_READ, &s);
	check(r != 0, "semaphore_bad_nc", "nc=%u r=%d (refused)", A->ncs, r);
}

// ---- DMA queues built in userspace, as libnrt builds them -----------------------------------
// A UDMA descriptor (csr-maps formats/udma_desc): len_ctrl (len [15:0], ring id [25:24], FIRST 26,
// LAST 27, INT_EN 28, DMB 30), meta_ctrl, a 64-bit buffer address.
struct desc {
	uint32_t len_ctrl, meta_ctrl;
	uint64_t buf;
};
#define D_FIRST (1u << 26)
#define D_LAST (1u << 27)
#define D_RING_ID(r) ((uint32_t)(r) << 24)

// One queue: a copy of `n` bytes from `src` to `dst` (device addresses), in descriptors of at
// most 64 KiB, then a completion descriptor pair writing a 4-byte marker into host memory; both
// rings on host or device memory. Returns the check's detail.
static void dma_queue_case(uint32_t nc, int rings_on_host, uint32_t qid)
{
	const char *name = rings_on_host ? "dma_queue_rings_host" : "dma_queue_rings_device";
	uint32_t eng = nc * A->dma_per_nc + 1;
	const uint32_t ndesc = 64, n = 200000;
	struct mem tx, rx, src, dst, back, marker;
	// Host chunks take no alignment (mc_alloc_internal: 'aligned host memory not supported').
	uint64_t ra = rings_on_host ? 0 : 4096;
	int r = mem_alloc(&tx, ndesc * 16, ra, rings_on_host, 0, nc) | mem_alloc(&rx, ndesc * 16, ra, rings_on_host, 0, nc) |
		mem_alloc(&src, 256 << 10, 0, 1, 0, nc) | mem_alloc(&dst, 256 << 10, 0, 0, 0, nc) |
		mem_alloc(&back, 256 << 10, 0, 1, 0, nc) | mem_alloc(&marker, 4096, 0, 1, 0, nc);
	if (r) {
		check(0, name, "nc=%u alloc r=%d", nc, r);
		return;
	}
	struct neuron_ioctl_dma_queue_init qi = { .eng_id = eng, .qid = qid, .tx_desc_count = ndesc, .rx_desc_count = ndesc,
		.tx_handle = tx.h, .rx_handle = rx.h, .rxc_handle = 0, .axi_port = 0 };
	r = io(NEURON_IOCTL_DMA_QUEUE_INIT, &qi);
	check(r == 0, "dma_queue_init", "nc=%u eng=%u q=%u rings on %s r=%d", nc, eng, qid, rings_on_host ? "host" : "device", r);
	if (r)
		goto out;

	uint8_t *in = malloc(n), *out = malloc(n);
	pattern(in, n, nc + 100 * rings_on_host);
	buf_copy(&src, in, n, 0, 1);
	uint32_t zero = 0;
	buf_copy(&marker, &zero, 4, 0, 1);
	uint32_t one = 0xabcd1234;
	buf_copy(&marker, &one, 4, 16, 1); // the marker's source word

	struct desc t[64], x[64];
	memset(t, 0, sizeof t);
	memset(x, 0, sizeof x);
	uint32_t k = 0;
	// Packet 1: host src -> device dst; packet 2: device dst -> host back (so the data is
	// verified without the kmod's own DMA); packet 3: the completion marker.
	uint64_t legs[2][2] = { { src.pa | A->host_base, dst.pa }, { dst.pa, back.pa | A->host_base } };
	for (int leg = 0; leg < 2; leg++) {
		for (uint32_t off = 0; off < n; k++) {
			uint32_t len = n - off > 65536 ? 65536 : n - off;
			uint32_t f = (off == 0 ? D_FIRST : 0) | (off + len == n ? D_LAST : 0) | D_RING_ID(1);
			t[k].len_ctrl = f | (len & 0xffff);
			t[k].buf = legs[leg][0] + off;
			x[k].len_ctrl = f | (len & 0xffff);
			x[k].buf = legs[leg][1] + off;
			off += len;
		}
	}
	// The completion pair: 4 bytes from the marker page's source word to its first word.
	t[k].len_ctrl = D_FIRST | D_LAST | D_RING_ID(1) | 4;
	t[k].buf = (marker.pa | A->host_base) + 16;
	x[k].len_ctrl = D_FIRST | D_LAST | D_RING_ID(1) | 4;
	x[k].buf = marker.pa | A->host_base;
	k++;
	if (rings_on_host) {
		r = buf_copy(&tx, t, k * 16, 0, 1) | buf_copy(&rx, x, k * 16, 0, 1);
	} else {
		struct neuron_ioctl_dma_copy_descriptors64 cd = { .mem_handle = tx.h, .buffer = t, .num_descs = k, .offset = 0,
			.queue_type = NEURON_DMA_QUEUE_TYPE_TX };
		r = io(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &cd);
		cd.mem_handle = rx.h;
		cd.buffer = x;
		cd.queue_type = NEURON_DMA_QUEUE_TYPE_RX;
		r |= io(NEURON_IOCTL_DMA_COPY_DESCRIPTORS64, &cd);
		check(r == 0, "dma_copy_descriptors", "nc=%u %u descriptors to device rings r=%d", nc, k, r);
	}
	struct neuron_ioctl_dma_queue_copy_start cs = { .eng_id = eng, .qid = qid, .tx_desc_count = k, .rx_desc_count = k };
	r = r ? r : io(NEURON_IOCTL_DMA_QUEUE_COPY_START, &cs);
	uint32_t got = 0;
	double t0 = now();
	while (r == 0 && now() - t0 < 5) {
		buf_copy(&marker, &got, 4, 0, 0);
		if (got == one)
			break;
		usleep(1000);
	}
	struct neuron_dma_queue_state ts = { 0 }, rs = { 0 };
	struct neuron_ioctl_dma_queue_get_state gs = { .eng_id = eng, .qid = qid, .tx = &ts, .rx = &rs };
	int gr = io(NEURON_IOCTL_DMA_QUEUE_GET_STATE, &gs);
	check(gr == 0 && ts.length == ndesc && rs.length == ndesc, "dma_queue_get_state",
	      "nc=%u eng=%u q=%u tx base %#llx len %u head %u tail %u, rx base %#llx len %u head %u tail %u r=%d", nc, eng, qid,
	      (unsigned long long)ts.base_addr, ts.length, ts.head_pointer, ts.tail_pointer, (unsigned long long)rs.base_addr, rs.length,
	      rs.head_pointer, rs.tail_pointer, gr);
	struct neuron_ioctl_dma_ack_completed ack = { .eng_id = eng, .qid = qid, .count = k };
	int ar = io(NEURON_IOCTL_DMA_ACK_COMPLETED, &ack);
	check(ar == 0, "dma_ack_completed", "nc=%u count=%u r=%d", nc, k, ar);
	// The data, back in host memory through the device chunk.
	memset(out, 0, n);
	int rr = got == one ? buf_copy(&back, out, n, 0, 0) : -1;
	int64_t d = rr ? -2 : differ(in, out, n);
	check(r == 0 && got == one && d == -1, name,
	      "nc=%u eng=%u q=%u %u descriptor pairs, %u bytes host->device->host: start r=%d marker %#x, data first_diff=%" PRId64 " (%.2fs)", nc, eng, qid, k,
	      n, r, got, d, now() - t0);
	struct neuron_ioctl_dma_descriptor_copyout co = { .eng_id = eng, .qid = qid, .type = NEURON_DMA_QUEUE_TYPE_TX,
		.start_index = 0, .count = k, .buffer = out };
	int cr = io(NEURON_IOCTL_DMA_DESCRIPTOR_COPYOUT, &co);
	check(cr == 0 && memcmp(out, t, k * 16) == 0, "dma_descriptor_copyout", "nc=%u tx ring of %u descriptors r=%d %s", nc, k, cr,
	      cr == 0 && memcmp(out, t, k * 16) == 0 ? "as written" : "differs");
	struct neuron_ioctl_dma_queue_release rel = { .eng_id = eng, .qid = qid };
	check(io(NEURON_IOCTL_DMA_QUEUE_RELEASE, &rel) == 0, "dma_queue_release", "nc=%u eng=%u q=%u", nc, eng, qid);
	free(in);
	free(out);
out:
	mem_free(&tx);
	mem_free(&rx);
	mem_free(&src);
	mem_free(&dst);
	mem_free(&back);
	mem_free(&marker);
}

static void check_dma_queues(void)
{
	mark("dma-queues-host-rings");
	for (uint32_t nc = 0; nc < A->ncs; nc++)
		dma_queue_case(nc, 1, 2);
	mark("dma-queues-device-rings");
	dma_queue_case(0, 0, 3);
	// DMA_QUEUE_INIT_BATCH: two queues of engine 3 in one call.
	{
		struct mem rings[4];
		int ar = 0;
		for (int i = 0; i < 4; i++)
			ar |= mem_alloc(&rings[i], 32 * 16, 0, 1, 0, 0);
		static struct neuron_ioctl_dma_queue_init_batch b;
		memset(&b, 0, sizeof b);
		b.count = 2;
		for (int i = 0; i < 2; i++)
			b.entries[i] = (struct neuron_ioctl_dma_queue_init){ .eng_id = 3, .qid = 5 + i, .tx_desc_count = 32, .rx_desc_count = 32,
				.tx_handle = rings[2 * i].h, .rx_handle = rings[2 * i + 1].h };
		int r = ar ? -1 : io(NEURON_IOCTL_DMA_QUEUE_INIT_BATCH, &b);
		int good = r == 0;
		for (int i = 0; good && i < 2; i++) {
			struct neuron_dma_queue_state ts = { 0 }, rs = { 0 };
			struct neuron_ioctl_dma_queue_get_state gs = { .eng_id = 3, .qid = 5 + i, .tx = &ts, .rx = &rs };
			good = io(NEURON_IOCTL_DMA_QUEUE_GET_STATE, &gs) == 0 && ts.length == 32 && rs.length == 32 &&
			       ts.base_addr == (rings[2 * i].pa | A->host_base) && rs.base_addr == (rings[2 * i + 1].pa | A->host_base);
		}
		check(good, "dma_queue_init_batch", "engine 3 queues 5 and 6 in one call: r=%d, their rings and lengths %s", r,
		      good ? "as given" : "differ");
		for (int i = 0; i < 4; i++)
			if (!ar)
				mem_free(&rings[i]);
	}
	// BAR_READ / BAR_WRITE of NC0's semaphore 11 (addresses: DEVICE_INFO's BAR0 + the register's
	// offset, the sem_read / sem_set windows of the kmod's v2/v3/v4 address_map.h).
	{
		struct neuron_ioctl_device_info di = { 0 };
		io(NEURON_IOCTL_DEVICE_INFO, &di);
		uint64_t sem_base = strcmp(A->name, "sunda") == 0 ? 0x02700000ull : 0xd2700000ull;
		__u64 addr = di.bar_address[0] + sem_base + 0x1000 + 4 * 11;
		__u32 v = 0;
		struct neuron_ioctl_semaphore s = { .nc_id = 0, .semaphore_index = 11, .value = 0x5eed };
		io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
		struct neuron_ioctl_bar_rw br = { .bar = 0, .address = &addr, .data = &v, .count = 1 };
		int r = io(NEURON_IOCTL_BAR_READ, &br);
		check(r == 0 && v == 0x5eed, "bar_read", "BAR0 semaphore read window, NC0 sem 11: r=%d value %#x", r, v);
		addr = di.bar_address[0] + sem_base + 0x1400 + 4 * 11;
		v = 0x77;
		r = io(NEURON_IOCTL_BAR_WRITE, &br);
		s.value = 0;
		io(NEURON_IOCTL_SEMAPHORE_READ, &s);
		check(r == 0 && s.value == 0x77, "bar_write", "BAR0 semaphore set window, NC0 sem 11: r=%d then SEMAPHORE_READ %#x", r, s.value);
		s.value = 0;
		io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
	}
	struct neuron_dma_eng_state es = { 0 };
	struct neuron_ioctl_dma_eng_get_state eg = { .eng_id = 1, .state = &es };
	int r = io(NEURON_IOCTL_DMA_ENG_GET_STATE, &eg);
	check(r == 0, "dma_eng_get_state", "eng=1 r=%d revision=%u max_queues=%u num_queues=%u tx_state=%u rx_state=%u", r,
	      es.revision_id, es.max_queues, es.num_queues, es.tx_state, es.rx_state);
}

static void check_nq(void)
{
	mark("notifications");
	for (uint32_t nc = 0; nc < A->ncs; nc++) {
		struct neuron_ioctl_notifications_init_v2 n = { .nq_dev_id = nc, .nq_dev_type = NQ_DEVICE_TYPE_NEURON_CORE,
			.nq_type = NQ_TYPE_ERROR, .engine_index = 0, .size = 64 * 1024, .on_host_memory = 1 };
		int r = io(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &n);
		void *p = r ? MAP_FAILED : mmap(NULL, n.size, PROT_READ, MAP_SHARED, fd, (off_t)n.mmap_offset);
		int zero = p != MAP_FAILED;
		for (uint32_t i = 0; zero && i < n.size; i++)
			zero = ((volatile uint8_t *)p)[i] == 0;
		// The ring's device address (the kmod's NQ slot registers) is its chunk's PA | host base.
		struct neuron_ioctl_mem_get_extended_info x = { .mem_handle = n.mem_handle, .version = 1 };
		int xr = r ? -1 : io(NEURON_IOCTL_MEM_GET_EXTENDED_INFO, &x);
		check(r == 0 && p != MAP_FAILED && zero && xr == 0 && x.size == n.size && x.mmap_offset == n.mmap_offset,
		      "notifications_init_v2_host", "nc=%u type=error size=64KiB r=%d mmap_offset=%#" PRIx64 " mapped=%d zeroed=%d pa=%#" PRIx64,
		      nc, r, (uint64_t)n.mmap_offset, p != MAP_FAILED, zero, (uint64_t)x.pa);
		if (p != MAP_FAILED)
			munmap(p, n.size);
	}
	struct neuron_ioctl_notifications_init_v2 n = { .nq_dev_id = 0, .nq_dev_type = NQ_DEVICE_TYPE_NEURON_CORE,
		.nq_type = NQ_TYPE_TRACE, .engine_index = 1, .size = 8192, .on_host_memory = 0, .dram_channel = 0 };
	int r = io(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &n);
	check(r == 0 && n.mmap_offset == (uint64_t)-1, "notifications_init_v2_device", "nc=0 type=trace engine=1 size=8KiB r=%d mmap_offset=%#" PRIx64,
	      r, (uint64_t)n.mmap_offset);
	n.size = 3000;
	r = io(NEURON_IOCTL_NOTIFICATIONS_INIT_V2, &n);
	check(r != 0, "notifications_init_v2_bad_size", "size=3000 r=%d (refused: not a power of two)", r);
}

static void check_reset(void)
{
	mark("nc-reset");
	for (uint32_t nc = 0; nc < A->ncs; nc++) {
		struct neuron_ioctl_semaphore s = { .nc_id = nc, .semaphore_index = 9, .value = 77 };
		io(NEURON_IOCTL_SEMAPHORE_WRITE, &s);
		double t = now();
		struct neuron_ioctl_device_reset rq = { .nc_map = 1u << nc };
		int r = io(NEURON_IOCTL_NC_RESET, &rq);
		struct neuron_ioctl_device_ready rd = { .request_id = rq.request_id, .result = -1 };
		int w = r ? -1 : io(NEURON_IOCTL_NC_RESET_READY, &rd);
		s.value = 1;
		io(NEURON_IOCTL_SEMAPHORE_READ, &s);
		check(r == 0 && w == 0 && rd.result == 0, "nc_reset", "nc=%u request=%u r=%d ready=%d result=%d semaphore 9 after: %u (%.2fs)", nc,
		      rq.request_id, r, w, rd.result, s.value, now() - t);
	}
	mark("device-reset");
	double t = now();
	struct neuron_ioctl_device_reset rq = { .nc_map = NEURON_NC_MAP_DEVICE };
	int r = io(NEURON_IOCTL_NC_RESET, &rq);
	struct neuron_ioctl_device_ready rd = { .request_id = rq.request_id, .result = -1 };
	int w = r ? -1 : io(NEURON_IOCTL_NC_RESET_READY, &rd);
	check(r == 0 && w == 0 && rd.result == 0, "device_reset", "nc_map=all request=%u r=%d ready=%d result=%d (%.2fs)", rq.request_id, r,
	      w, rd.result, now() - t);
	// The deprecated forms: DEVICE_RESET, then DEVICE_READY (1 = done).
	t = now();
	r = io(NEURON_IOCTL_DEVICE_RESET, NULL);
	__u8 ready = 0;
	w = r ? -1 : io(NEURON_IOCTL_DEVICE_READY, &ready);
	check(r == 0 && w == 0 && ready == 1, "device_reset_deprecated", "DEVICE_RESET r=%d, DEVICE_READY r=%d ready=%u (%.2fs)", r, w, ready,
	      now() - t);
	// After the device reset, memory and copies still work.
	struct mem m;
	uint8_t in[4096], out[4096];
	pattern(in, sizeof in, 9);
	r = mem_alloc(&m, 4096, 0, 1, 0, 0);
	r |= buf_copy(&m, in, sizeof in, 0, 1) | buf_copy(&m, out, sizeof out, 0, 0);
	check(r == 0 && memcmp(in, out, sizeof in) == 0, "after_device_reset", "host chunk round trip r=%d", r);
	mem_free(&m);
}

// ---- NC locks between processes (crwl) ------------------------------------------------------
// libnrt claims cores on a second open of the device, write-only: the kmod's "free access"
// file (IS_NEURON_DEVICE_FREE_ACCESS), whose flush unmarks every core of the closing process
// (ncdev_misc_flush). The locks and queues are the device file's (ncdev_flush).
static int cfd = -1;
static int cio(unsigned long cmd, void *arg)
{
	int r = ioctl(cfd, cmd, arg);
	return r < 0 ? -errno : r;
}
static int crwl_mark(uint32_t nc, uint32_t *max_avail, unsigned long *bitmap)
{
	struct neuron_ioctl_crwl_nc_map_ext m = { .nc_count = 1, .start_nc_index = nc, .end_nc_index = nc };
	int r = cio(NEURON_IOCTL_CRWL_NC_RANGE_MARK_EXT0, &m);
	if (max_avail)
		*max_avail = m.max_nc_available;
	if (bitmap)
		*bitmap = m.bitmap[0];
	return r;
}
static int crwl_unmark(uint32_t nc)
{
	struct neuron_ioctl_crwl_nc_map_ext m = { 0 };
	m.bitmap[0] = 1ul << nc;
	return cio(NEURON_IOCTL_CRWL_NC_RANGE_UNMARK_EXT0, &m);
}

// The child: open the device itself, take NC `nc` (range mark + writer enter), init a DMA queue
// on it, say so, and wait to be killed.
static int holder(const char *path, uint32_t nc)
{
	fd = open(path, O_RDWR);
	cfd = open(path, O_WRONLY);
	if (fd < 0 || cfd < 0)
		return 10;
	if (crwl_mark(nc, NULL, NULL))
		return 11;
	struct neuron_ioctl_crwl w = { .nc_id = nc };
	if (io(NEURON_IOCTL_CRWL_WRITER_ENTER, &w))
		return 12;
	struct mem tx, rx;
	if (mem_alloc(&tx, 4096, 0, 1, 0, nc) || mem_alloc(&rx, 4096, 0, 1, 0, nc))
		return 13;
	struct neuron_ioctl_dma_queue_init qi = { .eng_id = nc * A->dma_per_nc + 2, .qid = 4, .tx_desc_count = 64,
		.rx_desc_count = 64, .tx_handle = tx.h, .rx_handle = rx.h };
	if (io(NEURON_IOCTL_DMA_QUEUE_INIT, &qi))
		return 14;
	printf("KMOD-GUEST holder ready ring %#llx\n", (unsigned long long)(tx.pa | A->host_base));
	fflush(stdout);
	for (;;)
		pause();
}

static void check_crwl(const char *self)
{
	mark("crwl");
	const uint32_t nc = A->ncs - 1;
	cfd = open("/dev/neuron0", O_WRONLY | O_CLOEXEC);
	int pipefd[2];
	if (pipe(pipefd))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		close(pipefd[0]);
		char ncs[16];
		snprintf(ncs, sizeof ncs, "%u", nc);
		execl(self, self, A->name, "--holder", ncs, (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	char buf[128] = "";
	ssize_t got = read(pipefd[0], buf, sizeof buf - 1);
	int ready = got > 0 && strstr(buf, "holder ready") != NULL;
	unsigned long long ring = 0;
	if (ready)
		sscanf(strstr(buf, "ring ") ? strstr(buf, "ring ") + 5 : "0", "%llx", &ring);
	if (!ready) {
		int st = 0;
		waitpid(pid, &st, WNOHANG);
		snprintf(buf, sizeof buf, "no: holder exit status %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	check(ready, "crwl_holder", "a second process opened the device, marked nc %u, entered as writer, initialised a queue: %s", nc,
	      ready ? "yes" : buf);
	uint32_t avail = 0;
	int r = crwl_mark(nc, &avail, NULL);
	check(ready && r != 0, "crwl_range_mark_busy", "nc=%u held by pid %d: mark r=%d max_available=%u", nc, pid, r, avail);
	if (r == 0)
		crwl_unmark(nc);
	struct neuron_ioctl_crwl rw = { .nc_id = nc };
	// The holder is killed while it holds the core: the kmod's flush (ncdev_flush) releases its
	// marks, locks, queues and memory.
	kill(pid, SIGKILL);
	int st = 0;
	waitpid(pid, &st, 0);
	close(pipefd[0]);
	double t = now();
	r = -1;
	while (now() - t < 5 && (r = crwl_mark(nc, &avail, NULL)) != 0)
		usleep(10000);
	check(r == 0, "crwl_after_kill", "nc=%u free after the holder was killed: mark r=%d (%.2fs)", nc, r, now() - t);
	// The holder's queue is parked on the kmod's dummy ring (ndmar_handle_process_exit).
	struct neuron_dma_queue_state ts = { 0 }, rs = { 0 };
	struct neuron_ioctl_dma_queue_get_state gs = { .eng_id = nc * A->dma_per_nc + 2, .qid = 4, .tx = &ts, .rx = &rs };
	int gr = io(NEURON_IOCTL_DMA_QUEUE_GET_STATE, &gs);
	check(ready && gr == 0 && ts.base_addr != ring && ts.base_addr != 0, "crwl_queue_parked_after_kill",
	      "eng=%u q=4: the holder's ring %#llx, now %#llx (r=%d)", nc * A->dma_per_nc + 2, ring, (unsigned long long)ts.base_addr, gr);
	int w = io(NEURON_IOCTL_CRWL_WRITER_ENTER, &rw);
	int dg = w ? -1 : io(NEURON_IOCTL_CRWL_WRITER_DOWNGRADE, &rw);
	int ex = dg ? -1 : io(NEURON_IOCTL_CRWL_READER_EXIT, &rw);
	check(w == 0 && dg == 0 && ex == 0, "crwl_writer_reader", "nc=%u writer enter %d, downgrade %d, reader exit %d", nc, w, dg, ex);
	int re = io(NEURON_IOCTL_CRWL_READER_ENTER, &rw);
	int rx = io(NEURON_IOCTL_CRWL_READER_EXIT, &rw);
	check(re == 0 && rx == 0, "crwl_reader", "nc=%u reader enter %d exit %d", nc, re, rx);
	// A clean NC: reset it (libnrt does at nrt_init) and run a queue on it again.
	struct neuron_ioctl_device_reset rq = { .nc_map = 1u << nc };
	r = io(NEURON_IOCTL_NC_RESET, &rq);
	struct neuron_ioctl_device_ready rd = { .request_id = rq.request_id, .result = -1 };
	int rr = r ? -1 : io(NEURON_IOCTL_NC_RESET_READY, &rd);
	check(r == 0 && rr == 0 && rd.result == 0, "crwl_nc_reset_after_kill", "nc=%u r=%d ready=%d result=%d", nc, r, rr, rd.result);
	dma_queue_case(nc, 1, 4);
	check(crwl_unmark(nc) == 0, "crwl_range_unmark", "nc=%u", nc);
}

static void check_scrub(void)
{
	mark("hbm-scrub");
	// A device chunk on HBM 0 holds a pattern (written through BAR4, no DMA); the scrub with
	// init value 0 (a scrub clears memory) must leave it zero. Zero also keeps the simulator's
	// HBM sparse: a non-zero fill of a whole stack is 16-24 GiB of host memory.
	long pg = sysconf(_SC_PAGESIZE);
	struct mem m;
	int ar = mem_alloc(&m, 4 * pg, pg, 0, 0, 0);
	volatile uint32_t *w = ar ? MAP_FAILED : mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)m.pa);
	if (w != MAP_FAILED)
		for (long i = 0; i < pg; i++)
			w[i] = 0x5c0b0000u + (uint32_t)i;
	double t = now();
	struct neuron_ioctl_hbm_scrub_start s = { .nc_id = 0, .hbm_index = 0, .axi_port = 0, .init_val = 0 };
	int r = io(NEURON_IOCTL_HBM_SCRUB_START, &s);
	struct neuron_ioctl_hbm_scrub_wait wt = { .nc_id = 0, .hbm_index = 0 };
	int wr = r ? -1 : io(NEURON_IOCTL_HBM_SCRUB_WAIT, &wt);
	check(r == 0 && wr == 0, "hbm_scrub", "hbm 0 init 0: start r=%d wait r=%d (%.2fs)", r, wr, now() - t);
	int zero = w != MAP_FAILED;
	long bad = -1;
	uint32_t badv = 0;
	for (long i = 0; zero && i < pg; i++)
		if (w[i] != 0) {
			zero = 0;
			bad = i;
			badv = w[i];
		}
	uint32_t v[256];
	memset(v, 0xff, sizeof v);
	int rr = ar ? -1 : buf_copy(&m, v, sizeof v, 0, 0);
	int zero2 = rr == 0;
	for (int i = 0; zero2 && i < 256; i++)
		zero2 = v[i] == 0;
	check(r == 0 && wr == 0 && zero && zero2, "hbm_scrub_data",
	      "a chunk at %#llx patterned through BAR4 reads zero after the scrub: through BAR4 %s (word %ld: %#x), by the kmod's DMA %s (r=%d)",
	      (unsigned long long)m.pa, zero ? "yes" : "no", bad, badv, zero2 ? "yes" : "no", rr);
	if (w != MAP_FAILED)
		munmap((void *)w, 4 * pg);
	if (!ar)
		mem_free(&m);
}

static void check_fwio(void)
{
	mark("fw-io");
	// READ_HW_COUNTERS: registers read by the firmware (legacy FW-IO protocol).
	struct neuron_ioctl_device_info d = { 0 };
	io(NEURON_IOCTL_DEVICE_INFO, &d);
	__u64 addr[2] = { 0, 4 };
	uint32_t data[2] = { 0xdead, 0xdead };
	struct neuron_ioctl_read_hw_counters h = { .address = addr, .data = data, .count = 2 };
	double t = now();
	int r = io(NEURON_IOCTL_READ_HW_COUNTERS, &h);
	check(r == 0, "read_hw_counters", "2 counters r=%d data %#x %#x (%.2fs)", r, data[0], data[1], now() - t);
	uint32_t metric[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct neuron_ioctl_post_metric pm = { .data = metric, .data_size = sizeof metric };
	t = now();
	r = io(NEURON_IOCTL_POST_METRIC, &pm);
	check(r == 0, "post_metric", "%zu bytes r=%d (%.2fs)", sizeof metric, r, now() - t);
}

static void check_misc(void)
{
	mark("misc");
	struct neuron_ioctl_nc_model_started_count mc = { .nc_id = 0 };
	int r = io(NEURON_IOCTL_NC_MODEL_STARTED_COUNT, &mc);
	check(r == 0, "nc_model_started_count", "nc=0 r=%d count=%" PRIu64, r, (uint64_t)mc.started_count);
	struct neuron_ioctl_cinit_set cs = { .nc_id = 0, .state = NEURON_CINIT_STATE_STARTED };
	r = io(NEURON_IOCTL_CINIT_SET_STATE, &cs);
	check(r == 0, "cinit_set_state", "nc=0 started -> new state %u r=%d", cs.new_state, r);
	struct neuron_ioctl_host_device_id hd = { 0 };
	r = io(NEURON_IOCTL_HOST_DEVICE_ID, &hd);
	check(r == 0, "host_device_id", "r=%d id=%u", r, hd.host_device_id);
	// BAR_READ of BAR0 (the kmod reads the registers itself): two reads of one register agree.
	struct neuron_ioctl_device_info d = { 0 };
	io(NEURON_IOCTL_DEVICE_INFO, &d);
	(void)d;
}

int main(int argc, char **argv)
{
	const char *path = "/dev/neuron0";
	if (argc < 2) {
		fprintf(stderr, "usage: %s sunda|cayman|mariana\n", argv[0]);
		return 2;
	}
	for (unsigned i = 0; i < sizeof arches / sizeof arches[0]; i++)
		if (strcmp(argv[1], arches[i].name) == 0)
			A = &arches[i];
	if (!A) {
		fprintf(stderr, "unknown arch %s\n", argv[1]);
		return 2;
	}
	if (argc == 4 && strcmp(argv[2], "--holder") == 0)
		return holder(path, (uint32_t)atoi(argv[3]));

	double t = now();
	fd = open(path, O_RDWR | O_CLOEXEC);
	check(fd >= 0, "open", "%s errno=%d (%.2fs: the open waits for the device reset)", path, fd >= 0 ? 0 : errno, now() - t);
	if (fd < 0)
		return 1;
	check_info();
	check_mem();
	check_sem_events();
	check_mmap();
	check_buf_copy();
	check_mem_copy();
	check_dma_queues();
	check_nq();
	check_crwl(argv[0]);
	check_reset();
	check_scrub();
	check_fwio();
	check_misc();
	close(fd);
	printf("KMOD-GUEST guest-check %s: %d ok, %d FAIL\n", A->name, n_ok, n_fail);
	return n_fail ? 1 : 0;
}
