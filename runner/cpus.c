/*
 * cpus.c — which CPUs a sandbox's programs run on, and how the sandbox learns it.
 *
 * Runs in the caller (root) when a sandbox starts; needs no privilege of its own (it reads the caller's affinity).
 * A sandbox limited to c CPUs (cpu.max / cfs quota) gets ceil(c) CPUs of the caller's affinity as its programs'
 * affinity, starting at an offset taken from its host uid so that sandboxes spread over the machine; with no limit,
 * or a limit of at least every CPU the caller has, it keeps them all. Its skeleton's
 * /sys/devices/system/cpu/{online,possible,present} list the same CPUs, because glibc's sysconf(_SC_NPROCESSORS_*)
 * (Python's os.cpu_count(), multiprocessing's pools, nproc --all) reads them and would otherwise count the host's
 * CPUs in /proc/stat. So pools are sized to the share the sandbox really has.
 *
 * Invariants: the set is never empty and always a subset of the caller's affinity. It sizes pools and keeps
 * sandboxes apart on the CPU caches; the limit itself is the cgroup's quota, so a program that widens its own
 * affinity (it may: it is its own process) gains no CPU time.
 *
 * Also here: the CPUs a start's init child begins on (lb_cpus_apart), away from the thread that starts it, so that the
 * two halves of a start that are meant to run at once do (sandbox.c).
 */
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>

int lb_cpus_choose(uint32_t cpu_millicores, uint32_t spread_key, cpu_set_t *ret)
{
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return -errno;
	int have = CPU_COUNT(&allowed);
	if (have <= 0)
		return -ENOENT;
	unsigned want = cpu_millicores ? (cpu_millicores + 999) / 1000 : (unsigned)have;
	if (want >= (unsigned)have) {
		*ret = allowed;
		return 0;
	}
	/* The allowed CPUs in order; take `want` of them from the sandbox's offset, wrapping. */
	size_t ids[CPU_SETSIZE];
	size_t n = 0;
	for (size_t c = 0; c < CPU_SETSIZE && n < (size_t)have; c++)
		if (CPU_ISSET(c, &allowed))
			ids[n++] = c;
	cpu_set_t set;
	CPU_ZERO(&set);
	for (size_t i = 0; i < want; i++)
		CPU_SET(ids[(spread_key + i) % n], &set);
	*ret = set;
	return 0;
}

int lb_cpus_format(const cpu_set_t *set, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, set))
			continue;
		size_t last = c;
		while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
			last++;
		int w = last == c ? snprintf(buf + used, size - used, "%s%zu", used ? "," : "", c)
				  : snprintf(buf + used, size - used, "%s%zu-%zu", used ? "," : "", c, last);
		if (w < 0 || (size_t)w >= size - used)
			return -ENAMETOOLONG;
		used += (size_t)w;
		c = last;
	}
	if (used == 0)
		return -ENOENT;
	return 0;
}

bool lb_cpus_apart(cpu_set_t *ret_apart, cpu_set_t *ret_all)
{
	int cpu = sched_getcpu();
	if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(*ret_all), ret_all) < 0)
		return false;
	size_t here = (size_t)cpu;
	if (CPU_COUNT(ret_all) < 2 || !CPU_ISSET(here, ret_all))
		return false;
	*ret_apart = *ret_all;
	CPU_CLR(here, ret_apart);
	return true;
}
