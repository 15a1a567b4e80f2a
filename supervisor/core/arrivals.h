/*
 * arrivals.h — when new sandboxes arrived, how many spares that calls for, and when to try again after a spare could
 * not be made (arrivals.c).
 */
#ifndef LBD_ARRIVALS_H
#define LBD_ARRIVALS_H

#include <stdint.h>

/* The newest arrivals kept: no pool is sized larger than this (spare_sandboxes_max is at most 64 too). */
#define LBD_ARRIVALS_KEPT 64

struct lbd_arrivals {
	uint64_t at_ms[LBD_ARRIVALS_KEPT]; /* monotonic ms, a ring; the oldest is overwritten */
	unsigned next, n;
};

/* Records one arrival at now_ms (monotonic). */
void lbd_arrivals_note(struct lbd_arrivals *a, uint64_t now_ms);

/* The most arrivals that fell within burst_ms of each other among those of the last window_ms before now_ms: the
 * largest burst seen lately. 0 when none arrived in the window. */
uint32_t lbd_arrivals_peak(const struct lbd_arrivals *a, uint64_t now_ms, uint64_t window_ms, uint64_t burst_ms);

/* The spares to keep: none when floor is 0 (spares are off), else the recent peak, never below floor and never above
 * ceiling (a ceiling below floor means no growth). */
uint32_t lbd_arrivals_spares(uint32_t peak, uint32_t floor, uint32_t ceiling);

/* How long to wait before the next try after `failures` spares in a row could not be made (1 or more): 1 s, doubling
 * up to max_ms. A transient failure (a start that lost a race) costs new sandboxes a second of spares, a lasting one
 * (an image gone bad) one try per max_ms. */
uint64_t lbd_spares_retry_ms(uint32_t failures, uint64_t max_ms);

#endif
