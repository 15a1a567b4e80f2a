/*
 * clock.c — the daemon's two clocks: wall-clock milliseconds as the store keeps times, and monotonic milliseconds
 * for durations, timers and rate limits (see common.h).
 *
 * Runs in both of lensboxd's processes on any thread; pure reads of the kernel's clocks (and a timed wait on the
 * caller's condition), no state, no privilege used.
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

void lbd_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts); /* a default cond measures its deadline on this clock */
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}
