/*
 * refusals.c — what the sandbox refused during one run, as the run's output loop (exec.c) sees it: the seccomp
 * listener (seccomp_notify.c) and the Landlock audit reader (landlock_audit.c), begun before the clone, served from
 * the same poll as the output pipes, and summed up into the result's `refused`.
 *
 * Runs in the caller (root), on the run's thread. Invariants: every descriptor here is CLOEXEC and closed by
 * lb_refusals_end(); the work per poll round is bounded (one notification, one batch of records) so neither source
 * can starve the output or the deadline; memory is fixed.
 */
#include "internal.h"

#include "lb/landlock-abi.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* How long the result may wait for the end-of-run marker to come back through the audit queue (landlock_audit.c);
 * paid only where audit is on, only by runs that failed or had a Landlock refusal; ~1 ms when the marker passes. */
#define LB_LL_FINISH_MS 100

void lb_refusals_begin(struct lb_run_refusals *rf, const struct lb_sandbox *sb, const struct sock_fprog **ret_notify,
		       unsigned *ret_landlock_flags)
{
	memset(rf, 0, sizeof(*rf));
	rf->listener = -1;
	rf->notify = sb->notify.variant.filter ? &sb->notify : NULL;
	*ret_notify = rf->notify ? &sb->notify.variant : NULL;
	rf->ll_on = sb->landlock_fd >= 0 && lb_ll_audit_open(&rf->ll, sb->landlock_abi) == 0;
	*ret_landlock_flags = rf->ll_on ? LB_LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON : 0;
}

void lb_refusals_started(struct lb_run_refusals *rf, pid_t pid, int listener)
{
	rf->listener = listener;
	rf->ll.pid = pid;
}

size_t lb_refusals_pollfds(const struct lb_run_refusals *rf, struct pollfd *pf)
{
	pf[0] = (struct pollfd){ .fd = rf->listener, .events = POLLIN };
	pf[1] = (struct pollfd){ .fd = rf->ll_on ? rf->ll.fd : -1, .events = POLLIN };
	return 2;
}

void lb_refusals_serve(struct lb_run_refusals *rf, const struct pollfd *pf, size_t n)
{
	if (n < 2)
		return;
	/* One refused call per round, between reads of the output. POLLHUP: no process uses the filter any more. */
	if (pf[0].revents & POLLIN) {
		lb_seccomp_notify_answer(rf->listener, rf->notify, &rf->tally);
	} else if (pf[0].revents && rf->listener >= 0) {
		close(rf->listener);
		rf->listener = -1;
	}
	if (pf[1].revents)
		lb_ll_audit_read(&rf->ll);
}

void lb_refusals_end(struct lb_run_refusals *rf, bool failed, struct lb_refusals *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->syscall_reported = rf->notify != NULL;
	lb_syscall_tally_result(&rf->tally, ret);
	if (rf->listener >= 0)
		close(rf->listener);
	rf->listener = -1;
	if (rf->ll_on) {
		lb_ll_audit_finish(&rf->ll, failed, LB_LL_FINISH_MS);
		ret->filesystem_reported = true;
		ret->filesystem = rf->ll.fs;
		ret->audit_lost = rf->ll.lost;
	}
	lb_ll_audit_close(&rf->ll);
	rf->ll_on = false;
}

void lb_refusal_support(const struct lb_policy *policy, struct lb_refusal_support *ret)
{
	memset(ret, 0, sizeof(*ret));
	struct lb_seccomp_notify n;
	const char *why = NULL;
	/* lensboxd serves /v1/health without a policy when it did not load: nothing to count with then. */
	int r = policy ? lb_seccomp_notify_prepare(&policy->seccomp, &n, &why) : -EINVAL;
	if (!policy)
		ret->syscall_why_not = "the policy did not load";
	else if (r == 0)
		lb_seccomp_notify_free(&n);
	else
		ret->syscall_why_not = why ? why : "out of memory preparing the counting filter";
	int abi = lb_landlock_abi();
	ret->filesystem_why_not =
	    lb_ll_audit_why_not(abi > LB_LANDLOCK_MAX_KNOWN_ABI ? LB_LANDLOCK_MAX_KNOWN_ABI : abi);
}
