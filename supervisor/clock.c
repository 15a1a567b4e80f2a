/*
 * clock.c — the daemon's two clocks: wall-clock milliseconds as the store keeps times, and monotonic milliseconds
 * for durations, timers and rate limits (see common.h).
 *
 * Runs in both of lensboxd's processes on any thread; pure reads of the kernel's clocks, no state, no privilege used.
 */
#include <time.h>

#include "common.h"

int64_t lbd_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t lbd_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
