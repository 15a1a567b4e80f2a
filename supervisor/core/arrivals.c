/*
 * arrivals.c — sizes the spare pool by how fast new sandboxes arrive.
 *
 * Runs in lensboxd's core (root), under the spares' lock (spares.c); pure arithmetic on the times it is given, no
 * system call, no allocation. A refill makes one spare at a time (~20-30 ms of work, after a 200 ms settle), so a
 * pool of one serves new conversations that come seconds apart, while a burst (several users opening conversations
 * at once, a client creating sandboxes in a loop) drains it and the rest start cold. The largest burst of the last
 * minute, counted over 5-second stretches, is what the next burst is expected to be: the pool grows to it at once
 * and shrinks back to `spare_sandboxes` a minute after the burst, bounded by `spare_sandboxes_max`. Also the wait
 * before the next try after spares could not be made.
 *
 * Invariants: at most LBD_ARRIVALS_KEPT times are kept, so a peak is at most that; times from the future (a clock
 * never goes back, but a caller could pass an older now) count as in the window.
 */
#include "arrivals.h"

void lbd_arrivals_note(struct lbd_arrivals *a, uint64_t now_ms)
{
	a->at_ms[a->next] = now_ms;
	a->next = (a->next + 1) % LBD_ARRIVALS_KEPT;
	if (a->n < LBD_ARRIVALS_KEPT)
		a->n++;
}

uint32_t lbd_arrivals_peak(const struct lbd_arrivals *a, uint64_t now_ms, uint64_t window_ms, uint64_t burst_ms)
{
	uint32_t peak = 0;
	for (unsigned i = 0; i < a->n; i++) {
		uint64_t t = a->at_ms[i];
		if (t + window_ms < now_ms)
			continue;
		/* The arrivals in [t, t + burst_ms): every burst's count is found from its first arrival. */
		uint32_t count = 0;
		for (unsigned j = 0; j < a->n; j++)
			if (a->at_ms[j] >= t && a->at_ms[j] - t < burst_ms)
				count++;
		if (count > peak)
			peak = count;
	}
	return peak;
}

uint32_t lbd_arrivals_spares(uint32_t peak, uint32_t floor, uint32_t ceiling)
{
	if (floor == 0)
		return 0;
	if (peak > ceiling)
		peak = ceiling;
	return peak > floor ? peak : floor;
}

uint64_t lbd_spares_retry_ms(uint32_t failures, uint64_t max_ms)
{
	uint64_t ms = 1000;
	for (uint32_t i = 1; i < failures && ms < max_ms; i++)
		ms *= 2;
	return ms < max_ms ? ms : max_ms;
}
