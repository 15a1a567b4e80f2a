/*
 * units.h — parsing and printing the quantities people write in specs and config: sizes ("512Mi", "2Gi",
 * "1073741824"), CPU amounts ("1", "0.5", "500m") and durations ("60", "90s", "15m", "24h").
 *
 * Pure functions used by every process. Each parser accepts the whole string or fails with -EINVAL; overflow is
 * -ERANGE. Nothing is rounded silently.
 */
#ifndef LB_UNITS_H
#define LB_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Bytes from "N", "NKi", "NMi", "NGi", "NTi", "Nk", "NM", "NG" (decimal), "NK" = Ki. Fractions allowed with a unit
 * ("1.5Gi"). */
int lb_parse_size(const char *s, uint64_t *ret_bytes);

/* CPU in millicores from "1", "0.5", "500m". */
int lb_parse_cpu(const char *s, uint32_t *ret_millicores);

/* Seconds from "N", "Ns", "Nm", "Nh", "Nd". */
int lb_parse_duration(const char *s, uint64_t *ret_seconds);

/* Writes "512Mi", "1.5Gi", "300" (exact binary units where possible) into buf. Returns buf. */
char *lb_format_size(uint64_t bytes, char *buf, size_t size);

/* Writes "1", "0.5", "500m" style cpu. */
char *lb_format_cpu(uint32_t millicores, char *buf, size_t size);

#endif
