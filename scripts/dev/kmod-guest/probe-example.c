// SPDX-License-Identifier: Apache-2.0
// An example probe for scripts/dev/kmod-guest/run.sh --probe: a small program of ioctls on the
// vendor kmod's /dev/neuron0, compiled at run time against the checkout's neuron_ioctl.h
// (never committed), printing one `NTEST ok|FAIL NAME DETAIL` line per check.
//
//   scripts/dev/kmod-guest/run.sh --arch sunda --probe scripts/dev/kmod-guest/probe-example.c
//
// It checks a host chunk's round trip through MEM_BUF_COPY64 and mmap, and a semaphore of NC 0.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "neuron_ioctl.h"

static int fails;
static void ntest(int ok, const char *name, const char *detail, long v)
{
	printf("NTEST %s %s %s %ld\n", ok ? "ok" : "FAIL", name, detail, v);
	fails += !ok;
}

int main(void)
{
	int fd = open("/dev/neuron0", O_RDWR);
	ntest(fd >= 0, "probe_open", "errno", fd >= 0 ? 0 : errno);
	if (fd < 0)
		return 1;
	__u64 h = 0, pa = 0;
	struct neuron_ioctl_mem_alloc_v2 a = { .size = 8192, .align = 0, .host_memory = 1, .mem_handle = &h };
	int r = ioctl(fd, NEURON_IOCTL_MEM_ALLOC_V2, &a);
	struct neuron_ioctl_mem_get_pa g = { .mem_handle = h, .pa = &pa };
	r = r ? r : ioctl(fd, NEURON_IOCTL_MEM_GET_PA, &g);
	ntest(r == 0 && pa != 0, "probe_alloc", "r", r);
	char msg[] = "written through the ioctl, read through mmap";
	struct neuron_ioctl_mem_buf_copy64 c = { .mem_handle = h, .buffer = msg, .size = sizeof msg, .offset = 100,
		.copy_to_mem_handle = 1 };
	r = ioctl(fd, NEURON_IOCTL_MEM_BUF_COPY64, &c);
	char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, (off_t)pa);
	ntest(r == 0 && p != MAP_FAILED && memcmp(p + 100, msg, sizeof msg) == 0, "probe_mmap_roundtrip", "r", r);
	if (p != MAP_FAILED)
		munmap(p, 8192);
	struct neuron_ioctl_semaphore s = { .nc_id = 0, .semaphore_index = 3, .value = 41 };
	r = ioctl(fd, NEURON_IOCTL_SEMAPHORE_WRITE, &s);
	s.value = 1;
	r |= ioctl(fd, NEURON_IOCTL_SEMAPHORE_INCREMENT, &s);
	s.value = 0;
	r |= ioctl(fd, NEURON_IOCTL_SEMAPHORE_READ, &s);
	ntest(r == 0 && s.value == 42, "probe_semaphore", "value", (long)s.value);
	s.value = 0;
	ioctl(fd, NEURON_IOCTL_SEMAPHORE_WRITE, &s);
	struct neuron_ioctl_mem_free f = { .mem_handle = h };
	ntest(ioctl(fd, NEURON_IOCTL_MEM_FREE, &f) == 0, "probe_free", "r", 0);
	close(fd);
	return fails ? 1 : 0;
}
