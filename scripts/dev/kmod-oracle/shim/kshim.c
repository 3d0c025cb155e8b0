/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The recorder behind kshim.h: MMIO on the fake BARs the oracle registers becomes trace lines,
 * delays become recorded waits on a simulated clock (so every kmod timeout loop ends
 * deterministically), DMA-coherent memory gets fake bus addresses.
 *
 * Trace lines (one access or wait each, in program order):
 *   W <bar> <offset> <value>     a 32-bit write
 *   R <bar> <offset> <value>     a 32-bit read and the value the fake device returned
 *   D <kind> <amount>            a wait: msleep_ms, udelay_us, usleep_us, mdelay_ms, ndelay_ns
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kshim.h"

#define MAX_BARS 6

struct kshim_bar_map {
	u8 *base;
	u64 size;
};

static struct kshim_bar_map bars[MAX_BARS];
static FILE *trace;
static kshim_device_fn device;
static u64 clock_ns;
static unsigned errors;
unsigned long jiffies;
static struct task_struct task = { .pid = 4242, .tgid = 4242, .comm = "kmod-oracle" };
struct task_struct *kshim_current = &task;

void kshim_bug(const char *file, int line, const char *what)
{
	fprintf(stderr, "kmod-oracle: BUG at %s:%d: %s\n", file, line, what);
	exit(2);
}

void kshim_log(const char *level, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "kmod[%s]: ", level);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (fmt[0] && fmt[strlen(fmt) - 1] != '\n')
		fputc('\n', stderr);
	/* An error or warning printed on a traced path means the trace is not the sequence the
	 * kmod runs on a working device: the oracle fails. */
	if (trace && (!strcmp(level, "err") || !strcmp(level, "WARN")))
		errors++;
}

void kshim_bar(int bar, void *base, u64 size)
{
	if (bar < 0 || bar >= MAX_BARS)
		kshim_bug(__FILE__, __LINE__, "BAR index");
	bars[bar].base = base;
	bars[bar].size = size;
}

static int locate(const volatile void *addr, u64 *off)
{
	const u8 *p = (const u8 *)addr;
	for (int b = 0; b < MAX_BARS; b++) {
		if (bars[b].base && p >= bars[b].base && p + 4 <= bars[b].base + bars[b].size) {
			*off = (u64)(p - bars[b].base);
			return b;
		}
	}
	fprintf(stderr, "kmod-oracle: MMIO at %p is in no BAR\n", (const void *)p);
	exit(2);
}

u32 *kshim_reg(int bar, u64 off)
{
	if (bar < 0 || bar >= MAX_BARS || !bars[bar].base || off + 4 > bars[bar].size)
		kshim_bug(__FILE__, __LINE__, "register outside its BAR");
	return (u32 *)(bars[bar].base + off);
}

void kshim_set_device(kshim_device_fn fn)
{
	device = fn;
}

u32 kshim_read32(const volatile void *addr)
{
	u64 off;
	int b = locate(addr, &off);
	u32 v = *(const volatile u32 *)addr;
	if (trace)
		fprintf(trace, "R %d 0x%08llx 0x%08x\n", b, (unsigned long long)off, v);
	return v;
}

void kshim_write32(u32 v, volatile void *addr)
{
	u64 off;
	int b = locate(addr, &off);
	*(volatile u32 *)addr = v;
	if (trace)
		fprintf(trace, "W %d 0x%08llx 0x%08x\n", b, (unsigned long long)off, v);
	if (device)
		device(b, off, v);
}

u64 kshim_read64(const volatile void *addr)
{
	u64 lo = kshim_read32(addr);
	u64 hi = kshim_read32((const volatile u8 *)addr + 4);
	return lo | hi << 32;
}

void kshim_write64(u64 v, volatile void *addr)
{
	kshim_write32((u32)v, addr);
	kshim_write32((u32)(v >> 32), (volatile u8 *)addr + 4);
}

void kshim_wait(const char *kind, u64 amount)
{
	u64 ns = amount;
	if (!strcmp(kind, "msleep_ms") || !strcmp(kind, "mdelay_ms") || !strcmp(kind, "jiffies"))
		ns = amount * 1000000ULL;
	else if (!strcmp(kind, "udelay_us") || !strcmp(kind, "usleep_us"))
		ns = amount * 1000ULL;
	clock_ns += ns;
	jiffies = (unsigned long)(clock_ns / 1000000ULL);
	if (trace)
		fprintf(trace, "D %s %llu\n", kind, (unsigned long long)amount);
}

ktime_t ktime_get(void)
{
	return (ktime_t)clock_ns;
}

u64 ktime_get_ns(void)
{
	return clock_ns;
}

u64 ktime_get_real_ns(void)
{
	return clock_ns;
}

u64 ktime_get_seconds(void)
{
	return clock_ns / 1000000000ULL;
}

u64 ktime_get_real_seconds(void)
{
	return clock_ns / 1000000000ULL;
}

u64 get_jiffies_64(void)
{
	return jiffies;
}

void dump_stack(void)
{
}

void *kshim_zalloc(size_t n)
{
	return calloc(1, n ? n : 1);
}

char *kshim_strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Host memory's "physical" address: a fake, stable per allocation order, far from any pointer. */
#define FAKE_HOST_PA 0x0000000780000000ULL
struct host_alloc {
	const u8 *va;
	size_t size;
	u64 pa;
};
static struct host_alloc host[256];
static unsigned nhost;
static u64 next_pa = FAKE_HOST_PA;

static u64 host_register(const void *va, size_t size)
{
	if (nhost == sizeof(host) / sizeof(host[0]))
		kshim_bug(__FILE__, __LINE__, "too many host allocations");
	host[nhost].va = va;
	host[nhost].size = size;
	host[nhost].pa = next_pa;
	next_pa += (size + 0xFFFF) & ~0xFFFFULL;
	return host[nhost++].pa;
}

phys_addr_t kshim_virt_to_phys(const volatile void *p)
{
	const u8 *v = (const u8 *)p;
	for (unsigned i = 0; i < nhost; i++)
		if (v >= host[i].va && v < host[i].va + host[i].size)
			return host[i].pa + (u64)(v - host[i].va);
	/* kmalloc'd memory (FW-IO buffers): register it on first use. */
	return host_register((const void *)v, 1);
}

void *dma_alloc_coherent(struct device *dev, size_t size, dma_addr_t *handle, gfp_t flags)
{
	(void)dev;
	(void)flags;
	void *p = calloc(1, size ? size : 1);
	if (p && handle)
		*handle = host_register(p, size);
	return p;
}

void dma_free_coherent(struct device *dev, size_t size, void *cpu, dma_addr_t handle)
{
	(void)dev;
	(void)size;
	(void)handle;
	free(cpu);
}

int kstrtoint(const char *s, unsigned int base, int *res)
{
	char *end;
	long v = strtol(s, &end, (int)base);
	if (end == s)
		return -EINVAL;
	*res = (int)v;
	return 0;
}

int kstrtou32(const char *s, unsigned int base, u32 *res)
{
	char *end;
	unsigned long v = strtoul(s, &end, (int)base);
	if (end == s)
		return -EINVAL;
	*res = (u32)v;
	return 0;
}

int kstrtou64(const char *s, unsigned int base, u64 *res)
{
	char *end;
	unsigned long long v = strtoull(s, &end, (int)base);
	if (end == s)
		return -EINVAL;
	*res = v;
	return 0;
}

int kstrtoul(const char *s, unsigned int base, unsigned long *res)
{
	char *end;
	unsigned long v = strtoul(s, &end, (int)base);
	if (end == s)
		return -EINVAL;
	*res = v;
	return 0;
}

ssize_t kernel_read_file_from_path(const char *path, loff_t offset, void **buf, size_t buf_size,
				   size_t *file_size, enum kernel_read_file_id id)
{
	static const char product[] = "trn2.48xlarge\n";
	(void)id;
	if (strcmp(path, "/sys/class/dmi/id/product_name") != 0 || offset != 0) {
		fprintf(stderr, "kmod-oracle: the kmod reads %s, which the oracle does not provide\n", path);
		exit(4);
	}
	size_t n = sizeof(product) - 1 < buf_size ? sizeof(product) - 1 : buf_size;
	memcpy(*buf, product, n);
	if (file_size)
		*file_size = sizeof(product) - 1;
	return (ssize_t)n;
}

void kshim_trace_begin(const char *path, const char *op, const char *params)
{
	trace = fopen(path, "w");
	if (!trace) {
		perror(path);
		exit(2);
	}
	errors = 0;
	fprintf(trace, "# op %s %s\n", op, params);
}

void kshim_trace_note(const char *fmt, ...)
{
	va_list ap;
	if (!trace)
		return;
	va_start(ap, fmt);
	vfprintf(trace, fmt, ap);
	va_end(ap);
	fputc('\n', trace);
}

void kshim_trace_end(void)
{
	fclose(trace);
	trace = NULL;
	if (errors) {
		fprintf(stderr, "kmod-oracle: the kmod reported %u error(s) on a traced path\n", errors);
		exit(3);
	}
}
