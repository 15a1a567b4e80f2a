/*
 * probe.c — lensbox-probe, a static binary the security suite runs INSIDE sandboxes. Each invocation attempts one
 * operation and prints exactly one JSON line on stdout describing the precise outcome, so a test can assert the
 * exact refusal:
 *
 *     lensbox-probe socket packet raw 0      ->  {"op":"socket","ok":false,"errno":"EPERM","errno_num":1}
 *     lensbox-probe x32 39                   ->  {"op":"x32","ok":false,"signal":"SIGSYS"}
 *     lensbox-probe status                   ->  {"op":"status","ok":true,"CapEff":"0000000000000000",...}
 *
 * Operations that could kill the caller (foreign-architecture syscalls, denied calls under a KILL action) run in a
 * forked child and report how that child ended. Runs unprivileged inside the sandbox (it is the attacker); it is
 * test code, never part of lensboxd. Statically linked so it needs nothing from the image. `lensbox-probe help`
 * lists the operations. Exit status: 0 when a line was printed (whatever the outcome), 2 on a usage error.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#define X32_SYSCALL_BIT 0x40000000L

/* ---- one JSON line ----------------------------------------------------------------------------------------- */

static char out[1 << 20];
static size_t out_len;

static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...)
{
	if (out_len >= sizeof(out))
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out + out_len, sizeof(out) - out_len, fmt, ap);
	va_end(ap);
	if (n > 0)
		out_len += (size_t)n < sizeof(out) - out_len ? (size_t)n : sizeof(out) - out_len - 1;
}

/* A JSON string; bytes outside printable ASCII are escaped so the line stays valid whatever we read. */
static void emit_raw_str(const char *s, size_t len)
{
	emit("\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			emit("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			emit("\\u%04x", c);
		else
			emit("%c", c);
	}
	emit("\"");
}

static void emit_str(const char *key, const char *s, size_t len)
{
	emit(",\"%s\":", key);
	emit_raw_str(s, len);
}

static void emit_cstr(const char *key, const char *s)
{
	emit_str(key, s, strlen(s));
}

static const char *op_name;

static int finish(void)
{
	emit("}\n");
	fwrite(out, 1, out_len, stdout);
	fflush(stdout);
	return 0;
}

static void begin(bool ok)
{
	out_len = 0;
	emit("{\"op\":\"%s\",\"ok\":%s", op_name, ok ? "true" : "false");
}

static int report_errno(int e)
{
	begin(false);
	const char *name = strerrorname_np(e);
	emit(",\"errno\":\"%s\",\"errno_num\":%d", name ? name : "?", e);
	return finish();
}

/* Reports r >= 0 as success (with "value") and r < 0 as the current errno. */
static int report(long r)
{
	if (r < 0)
		return report_errno(errno);
	begin(true);
	emit(",\"value\":%ld", r);
	return finish();
}

static int report_wait_status(int st)
{
	if (WIFSIGNALED(st)) {
		begin(false);
		const char *s = sigabbrev_np(WTERMSIG(st));
		emit(",\"signal\":\"SIG%s\",\"signal_num\":%d", s ? s : "?", WTERMSIG(st));
		return finish();
	}
	int code = WEXITSTATUS(st);
	if (code >= 128 && code < 128 + 4096) /* the child's errno, see in_child() */
		return report_errno(code - 128);
	begin(true);
	emit(",\"exit\":%d", code);
	return finish();
}

/* Runs fn in a child and reports how it ended: killed by a signal, failed with an errno, or succeeded. */
static int in_child(long (*fn)(char **), char **args)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return report_errno(errno);
	if (pid == 0) {
		errno = 0;
		long r = fn(args);
		_exit(r < 0 ? 128 + (errno & 0x7f) : 0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return report_errno(errno);
	return report_wait_status(st);
}

static long num(const char *s)
{
	return s ? strtol(s, NULL, 0) : 0;
}

static unsigned long unum(const char *s)
{
	return s ? strtoul(s, NULL, 0) : 0;
}

/* ---- files ----------------------------------------------------------------------------------------------- */

static int open_flags(const char *spec)
{
	static const struct {
		const char *n;
		int f;
	} t[] = {
		{ "rdonly", O_RDONLY }, { "wronly", O_WRONLY },	    { "rdwr", O_RDWR },	      { "creat", O_CREAT },
		{ "trunc", O_TRUNC },	{ "append", O_APPEND },	    { "excl", O_EXCL },	      { "dir", O_DIRECTORY },
		{ "path", O_PATH },	{ "nofollow", O_NOFOLLOW }, { "tmpfile", O_TMPFILE }, { "noctty", O_NOCTTY }
	};
	int f = 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", spec ? spec : "rdonly");
	for (char *save = NULL, *w = strtok_r(buf, ",|", &save); w; w = strtok_r(NULL, ",|", &save))
		for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
			if (strcmp(w, t[i].n) == 0)
				f |= t[i].f;
	return f | O_CLOEXEC;
}

static int op_open(char **a)
{
	return report(open(a[0], open_flags(a[1]), 0644));
}

static int op_read(char **a)
{
	size_t max = a[1] ? unum(a[1]) : 4096;
	if (max > sizeof(out) / 8)
		max = sizeof(out) / 8;
	int fd = open(a[0], O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return report_errno(errno);
	char *buf = malloc(max + 1);
	ssize_t n = buf ? read(fd, buf, max) : -1;
	if (n < 0)
		return report_errno(errno);
	begin(true);
	emit(",\"len\":%zd", n);
	emit_str("data", buf, (size_t)n);
	return finish();
}

static int op_write(char **a)
{
	const char *data = a[1] ? a[1] : "lensbox-probe\n";
	int fd = open(a[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
	if (fd < 0)
		return report_errno(errno);
	return report(write(fd, data, strlen(data)));
}

static int op_stat(char **a)
{
	struct stat st;
	if (lstat(a[0], &st) < 0)
		return report_errno(errno);
	begin(true);
	const char *type = S_ISREG(st.st_mode)	  ? "file"
			   : S_ISDIR(st.st_mode)  ? "dir"
			   : S_ISLNK(st.st_mode)  ? "symlink"
			   : S_ISCHR(st.st_mode)  ? "char"
			   : S_ISBLK(st.st_mode)  ? "block"
			   : S_ISFIFO(st.st_mode) ? "fifo"
						  : "socket";
	emit(",\"type\":\"%s\",\"mode\":\"%04o\",\"uid\":%u,\"gid\":%u,\"size\":%lld,\"rdev\":\"%u:%u\"", type,
	     st.st_mode & 07777, st.st_uid, st.st_gid, (long long)st.st_size, major(st.st_rdev), minor(st.st_rdev));
	return finish();
}

static int op_ls(char **a)
{
	DIR *d = opendir(a[0]);
	if (!d)
		return report_errno(errno);
	begin(true);
	emit(",\"entries\":[");
	bool first = true;
	for (struct dirent *e; (e = readdir(d));) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		emit("%s", first ? "" : ",");
		emit_raw_str(e->d_name, strlen(e->d_name));
		first = false;
	}
	emit("]");
	return finish();
}

static int op_readlink(char **a)
{
	char buf[4096];
	ssize_t n = readlink(a[0], buf, sizeof(buf));
	if (n < 0)
		return report_errno(errno);
	begin(true);
	emit_str("target", buf, (size_t)n);
	return finish();
}

static int op_mknod(char **a)
{
	mode_t type = !a[1] || a[1][0] == 'c' ? S_IFCHR
		      : a[1][0] == 'b'	      ? S_IFBLK
		      : a[1][0] == 'p'	      ? S_IFIFO
					      : S_IFSOCK;
	return report(mknod(a[0], type | 0666, makedev((unsigned)num(a[2]), (unsigned)num(a[3]))));
}

static int op_truncate(char **a)
{
	return report(truncate(a[0], (off_t)num(a[1])));
}
static int op_unlink(char **a)
{
	return report(unlink(a[0]));
}
static int op_rmdir(char **a)
{
	return report(rmdir(a[0]));
}
static int op_mkdir(char **a)
{
	return report(mkdir(a[0], 0755));
}
static int op_rename(char **a)
{
	return report(rename(a[0], a[1]));
}
static int op_link(char **a)
{
	return report(link(a[0], a[1]));
}
static int op_symlink(char **a)
{
	return report(symlink(a[0], a[1]));
}
static int op_chmod(char **a)
{
	return report(chmod(a[0], (mode_t)strtoul(a[1], NULL, 8)));
}
static int op_chown(char **a)
{
	return report(lchown(a[0], (uid_t)num(a[1]), (gid_t)num(a[2])));
}
/* VALUE is taken as is, or as bytes when written "hex:0100000201..." (capability headers contain NUL bytes). */
static int op_setxattr(char **a)
{
	unsigned char buf[256];
	size_t n = 0;
	if (strncmp(a[2], "hex:", 4) == 0) {
		for (const char *h = a[2] + 4; h[0] && h[1] && n < sizeof(buf); h += 2) {
			unsigned v;
			if (sscanf(h, "%2x", &v) != 1)
				break;
			buf[n++] = (unsigned char)v;
		}
		return report(lsetxattr(a[0], a[1], buf, n, 0));
	}
	return report(lsetxattr(a[0], a[1], a[2], strlen(a[2]), 0));
}
static int op_utime(char **a)
{
	return report(utimensat(AT_FDCWD, a[0], NULL, 0));
}

static int op_exec(char **a)
{
	fflush(stdout);
	execv(a[0], a);
	return report_errno(errno);
}

static int op_statfs(char **a)
{
	struct statfs s;
	if (statfs(a[0], &s) < 0)
		return report_errno(errno);
	begin(true);
	emit(",\"type\":\"0x%lx\",\"bsize\":%ld,\"blocks\":%llu,\"bavail\":%llu,\"flags\":%ld", (unsigned long)s.f_type,
	     (long)s.f_bsize, (unsigned long long)s.f_blocks, (unsigned long long)s.f_bavail, (long)s.f_flags);
	return finish();
}

/* ---- identity and process state --------------------------------------------------------------------------- */

static void emit_status_field(const char *status, const char *field)
{
	char key[64];
	snprintf(key, sizeof(key), "\n%s:", field);
	const char *p = strstr(status, key);
	if (!p)
		return;
	p += strlen(key);
	while (*p == ' ' || *p == '\t')
		p++;
	emit_str(field, p, strcspn(p, "\n"));
}

static int op_status(char **a)
{
	(void)a;
	char buf[8192] = "\n";
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return report_errno(errno);
	ssize_t n = read(fd, buf + 1, sizeof(buf) - 2);
	close(fd);
	if (n < 0)
		return report_errno(errno);
	buf[n + 1] = '\0';
	begin(true);
	static const char *const fields[] = { "Uid",
					      "Gid",
					      "Groups",
					      "CapInh",
					      "CapPrm",
					      "CapEff",
					      "CapBnd",
					      "CapAmb",
					      "NoNewPrivs",
					      "Seccomp",
					      "Seccomp_filters",
					      "NSpid",
					      "Speculation_Store_Bypass" };
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		emit_status_field(buf, fields[i]);
	emit(",\"securebits\":%d,\"dumpable\":%d", prctl(PR_GET_SECUREBITS), prctl(PR_GET_DUMPABLE));
	struct rlimit core;
	getrlimit(RLIMIT_CORE, &core);
	emit(",\"core_limit\":%llu", (unsigned long long)core.rlim_cur);
	char cwd[512] = "";
	if (!getcwd(cwd, sizeof(cwd)))
		cwd[0] = '\0';
	emit_cstr("cwd", cwd);
	struct utsname u;
	uname(&u);
	emit_cstr("hostname", u.nodename);
	emit(",\"pid\":%d,\"ppid\":%d", getpid(), getppid());
	extern char **environ;
	emit(",\"env\":[");
	for (char **e = environ; *e; e++) {
		emit("%s", e == environ ? "" : ",");
		emit_raw_str(*e, strlen(*e));
	}
	emit("]");
	return finish();
}

static int op_fds(char **a)
{
	(void)a;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return report_errno(errno);
	int self = dirfd(d);
	begin(true);
	emit(",\"fds\":{");
	bool first = true;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.' || atoi(e->d_name) == self)
			continue;
		char path[300], target[512];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t n = readlink(path, target, sizeof(target) - 1);
		target[n < 0 ? 0 : n] = '\0';
		emit("%s\"%s\":", first ? "" : ",", e->d_name);
		emit_raw_str(target, strlen(target));
		first = false;
	}
	emit("}");
	closedir(d);
	return finish();
}

static int op_setuid(char **a)
{
	return report(setuid((uid_t)num(a[0])));
}
static int op_setgid(char **a)
{
	return report(setgid((gid_t)num(a[0])));
}
static int op_setgroups(char **a)
{
	gid_t g = (gid_t)num(a[0]);
	return report(setgroups(1, &g));
}
static int op_capset(char **a)
{
	(void)a;
	struct {
		uint32_t version;
		int pid;
	} hdr = { 0x20080522, 0 };
	struct {
		uint32_t eff, prm, inh;
	} data[2] = { { 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff, 0xffffffff } };
	return report(syscall(SYS_capset, &hdr, data));
}
static int op_securebits(char **a)
{
	return report(prctl(PR_SET_SECUREBITS, unum(a[0]), 0, 0, 0));
}
static int op_setsid(char **a)
{
	(void)a;
	return report(setsid());
}

/* ---- mounts and roots ------------------------------------------------------------------------------------- */

static int op_mount(char **a)
{
	return report(mount(a[0], a[1], a[2], a[3] ? unum(a[3]) : 0, a[3] && a[4] ? a[4] : NULL));
}
static int op_umount(char **a)
{
	return report(umount2(a[0], a[1] ? (int)num(a[1]) : 0));
}
static int op_pivot_root(char **a)
{
	return report(syscall(SYS_pivot_root, a[0], a[1]));
}
static int op_chroot(char **a)
{
	return report(chroot(a[0]));
}
static int op_fsopen(char **a)
{
	return report(syscall(__NR_fsopen, a[0] ? a[0] : "tmpfs", 0L));
}
static int op_open_tree(char **a)
{
	return report(syscall(__NR_open_tree, AT_FDCWD, a[0], 1L /* CLONE */));
}

/* The classic chroot breakout: chroot into a subdirectory, then walk up with chdir("..") and chroot(".") — it only
 * works for a process that can chroot at all. Reports what "/" lists afterwards. */
static int op_chroot_escape(char **a)
{
	const char *dir = a[0] ? a[0] : "/tmp/jail";
	mkdir(dir, 0755);
	if (chroot(dir) < 0)
		return report_errno(errno);
	for (int i = 0; i < 64; i++)
		if (chdir("..") < 0)
			return report_errno(errno);
	if (chroot(".") < 0)
		return report_errno(errno);
	char *ls[] = { "/", NULL };
	return op_ls(ls);
}

/* ---- namespaces and processes ------------------------------------------------------------------------------ */

static unsigned long ns_flags(const char *spec)
{
	static const struct {
		const char *n;
		unsigned long f;
	} t[] = { { "user", CLONE_NEWUSER },	 { "mnt", CLONE_NEWNS },
		  { "pid", CLONE_NEWPID },	 { "net", CLONE_NEWNET },
		  { "ipc", CLONE_NEWIPC },	 { "uts", CLONE_NEWUTS },
		  { "cgroup", CLONE_NEWCGROUP }, { "time", 0x80 /* CLONE_NEWTIME */ },
		  { "files", CLONE_FILES },	 { "fs", CLONE_FS } };
	unsigned long f = 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", spec ? spec : "");
	for (char *save = NULL, *w = strtok_r(buf, ",|", &save); w; w = strtok_r(NULL, ",|", &save)) {
		bool found = false;
		for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
			if (strcmp(w, t[i].n) == 0) {
				f |= t[i].f;
				found = true;
			}
		if (!found)
			f |= strtoul(w, NULL, 0);
	}
	return f;
}

static int op_unshare(char **a)
{
	return report(unshare((int)ns_flags(a[0])));
}

static int op_setns(char **a)
{
	int fd = open(a[0], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return report_errno(errno);
	return report(setns(fd, 0));
}

static int op_clone(char **a)
{
	long r = syscall(SYS_clone, (long)(ns_flags(a[0]) | SIGCHLD), 0L, 0L, 0L, 0L);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return report(r);
}

static int op_clone3(char **a)
{
	struct {
		uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	} args = { .flags = ns_flags(a[0]), .exit_signal = SIGCHLD };
	long r = syscall(__NR_clone3, &args, sizeof(args));
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, 0);
	return report(r);
}

static int op_kill(char **a)
{
	return report(kill((pid_t)num(a[0]), a[1] ? (int)num(a[1]) : 0));
}
static int op_ptrace_attach(char **a)
{
	return report(syscall(SYS_ptrace, 16L /* ATTACH */, num(a[0]), 0L, 0L));
}
static int op_ptrace_traceme(char **a)
{
	(void)a;
	return report(syscall(SYS_ptrace, 0L /* TRACEME */, 0L, 0L, 0L));
}

static int op_process_vm(char **a, bool write)
{
	char buf[16] = "lensbox";
	struct iovec local = { buf, sizeof(buf) }, remote = { (void *)unum(a[1]), sizeof(buf) };
	pid_t pid = a[0] ? (pid_t)num(a[0]) : getpid();
	if (!a[1])
		remote.iov_base = buf; /* our own buffer: only the syscall filter can refuse it */
	long r = write ? syscall(SYS_process_vm_writev, pid, &local, 1L, &remote, 1L, 0L)
		       : syscall(SYS_process_vm_readv, pid, &local, 1L, &remote, 1L, 0L);
	return report(r);
}
static int op_pvm_read(char **a)
{
	return op_process_vm(a, false);
}
static int op_pvm_write(char **a)
{
	return op_process_vm(a, true);
}
static int op_pidfd_open(char **a)
{
	return report(syscall(__NR_pidfd_open, num(a[0]), 0L));
}
static int op_pidfd_getfd(char **a)
{
	long pfd = syscall(__NR_pidfd_open, a[0] ? num(a[0]) : (long)getpid(), 0L);
	if (pfd < 0)
		return report_errno(errno);
	return report(syscall(__NR_pidfd_getfd, pfd, 0L, 0L));
}

static int op_ps(char **a)
{
	(void)a;
	DIR *d = opendir("/proc");
	if (!d)
		return report_errno(errno);
	begin(true);
	emit(",\"pids\":[");
	bool first = true;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] >= '1' && e->d_name[0] <= '9') {
			char path[300], comm[64] = "";
			snprintf(path, sizeof(path), "/proc/%s/comm", e->d_name);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd >= 0 ? read(fd, comm, sizeof(comm) - 1) : 0;
			if (fd >= 0)
				close(fd);
			comm[n > 0 ? n - 1 : 0] = '\0';
			emit("%s{\"pid\":%s", first ? "" : ",", e->d_name);
			emit_cstr("comm", comm);
			emit("}");
			first = false;
		}
	emit("]");
	closedir(d);
	return finish();
}

/* ---- kernel interfaces the policy denies ------------------------------------------------------------------- */

/* Gets a handle with name_to_handle_at (a made-up one if the filesystem has none) and opens it: the "shocker"
 * escape opened host files by guessing handles relative to a mount fd. */
static int op_open_by_handle_at(char **a)
{
	struct {
		struct file_handle fh;
		unsigned char bytes[128];
	} h;
	memset(&h, 0, sizeof(h));
	h.fh.handle_bytes = sizeof(h.bytes);
	int mount_id;
	if (name_to_handle_at(AT_FDCWD, a[0] ? a[0] : "/sandbox", &h.fh, &mount_id, 0) < 0) {
		h.fh.handle_bytes = 8;
		h.fh.handle_type = 1; /* FILEID_INO32_GEN: inode 2 (a root directory), generation 0 */
		h.bytes[0] = 2;
	}
	int mfd = open(a[0] ? a[0] : "/sandbox", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return report(open_by_handle_at(mfd, &h.fh, O_RDONLY));
}

static int op_keyctl(char **a)
{
	(void)a;
	return report(syscall(SYS_keyctl, 0L /* GET_KEYRING_ID */, -3L /* SESSION */, 1L));
}
static int op_add_key(char **a)
{
	(void)a;
	return report(syscall(SYS_add_key, "user", "lensbox", "x", 1L, -3L));
}
static int op_bpf(char **a)
{
	(void)a;
	union {
		struct {
			uint32_t map_type, key_size, value_size, max_entries;
		} m;
		char pad[128];
	} attr;
	memset(&attr, 0, sizeof(attr));
	attr.m.map_type = 2; /* BPF_MAP_TYPE_ARRAY */
	attr.m.key_size = 4;
	attr.m.value_size = 4;
	attr.m.max_entries = 1;
	return report(syscall(SYS_bpf, 0L /* BPF_MAP_CREATE */, &attr, (long)sizeof(attr)));
}
static int op_perf_event_open(char **a)
{
	(void)a;
	struct {
		uint32_t type, size;
		uint64_t config;
		char rest[112];
	} attr;
	memset(&attr, 0, sizeof(attr));
	attr.type = 1;	 /* PERF_TYPE_SOFTWARE */
	attr.size = 128; /* PERF_ATTR_SIZE_VER7-ish; the kernel accepts larger zeroed tails */
	attr.config = 0; /* PERF_COUNT_SW_CPU_CLOCK */
	return report(syscall(SYS_perf_event_open, &attr, 0L, -1L, -1L, 0L));
}
static int op_io_uring(char **a)
{
	(void)a;
	char params[120];
	memset(params, 0, sizeof(params));
	return report(syscall(__NR_io_uring_setup, 4L, params));
}
static int op_userfaultfd(char **a)
{
	(void)a;
	return report(syscall(SYS_userfaultfd, (long)O_CLOEXEC));
}
static int op_personality(char **a)
{
	return report(syscall(SYS_personality, (long)unum(a[0])));
}
static int op_iopl(char **a)
{
	(void)a;
	return report(syscall(SYS_iopl, 3L));
}
static int op_syscall(char **a)
{
	long v[6] = { 0 };
	for (int i = 0; i < 6 && a[1 + i]; i++)
		v[i] = (long)unum(a[1 + i]);
	return report(syscall(num(a[0]), v[0], v[1], v[2], v[3], v[4], v[5]));
}
static int op_sethostname(char **a)
{
	return report(sethostname(a[0], strlen(a[0])));
}

/* i386 entry through int 0x80: the kernel's compat table, AUDIT_ARCH_I386. */
#if defined(__x86_64__)
static long do_int80(char **a)
{
	long nr = a[0] ? num(a[0]) : 20 /* getpid */, ret;
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(0L), "c"(0L), "d"(0L) : "memory");
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return 0;
}
#else
static long do_int80(char **a)
{
	(void)a;
	errno = ENOTSUP; /* there is no i386 entry point to attack on this architecture */
	return -1;
}
#endif
/* x32 ABI: the 64-bit entry with __X32_SYSCALL_BIT set in the number. */
static long do_x32(char **a)
{
	return syscall(X32_SYSCALL_BIT | (a[0] ? num(a[0]) : 39 /* getpid */));
}
static long do_raw_syscall(char **a)
{
	return syscall(num(a[0]), 0L, 0L, 0L, 0L, 0L, 0L);
}
static int op_int80(char **a)
{
	return in_child(do_int80, a);
}
static int op_x32(char **a)
{
	return in_child(do_x32, a);
}
static int op_syscall_child(char **a)
{
	return in_child(do_raw_syscall, a);
}

static int op_landlock_abi(char **a)
{
	(void)a;
	return report(syscall(__NR_landlock_create_ruleset, NULL, 0L, (long)LANDLOCK_CREATE_RULESET_VERSION));
}

/* ---- sockets --------------------------------------------------------------------------------------------- */

static long lookup(const char *s, const char *const *names, const long *values, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return values[i];
	return s ? (long)strtoul(s, NULL, 0) : 0;
}

static int op_socket(char **a)
{
	static const char *const fn[] = {
		"unix", "inet", "inet6", "netlink", "packet", "vsock", "alg", "key", "unspec"
	};
	static const long fv[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, 40, 38, 15, AF_UNSPEC };
	static const char *const tn[] = { "stream", "dgram", "raw", "seqpacket" };
	static const long tv[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET };
	long fam = lookup(a[0], fn, fv, 9), type = lookup(a[1], tn, tv, 4), proto = a[1] ? (long)unum(a[2]) : 0;
	return report(syscall(SYS_socket, fam, type | SOCK_CLOEXEC, proto));
}

static int parse_addr(const char *host, const char *port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)num(port));
		*len = sizeof(*in4);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)num(port));
		*len = sizeof(*in6);
		return AF_INET6;
	}
	errno = EINVAL;
	return -1;
}

static int op_tcp_connect(char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = parse_addr(a[0], a[1], &ss, &len);
	if (fam < 0)
		return report_errno(errno);
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return report_errno(errno);
	return report(connect(fd, (struct sockaddr *)&ss, len));
}

static int op_tcp_bind(char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = parse_addr(a[1] ? a[1] : "127.0.0.1", a[0], &ss, &len);
	if (fam < 0)
		return report_errno(errno);
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return report_errno(errno);
	return report(bind(fd, (struct sockaddr *)&ss, len));
}

static int op_udp_send(char **a)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = parse_addr(a[0], a[1], &ss, &len);
	if (fam < 0)
		return report_errno(errno);
	int fd = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return report_errno(errno);
	return report(sendto(fd, "x", 1, 0, (struct sockaddr *)&ss, len));
}

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sun)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	size_t n = strlen(name);
	if (n > sizeof(sun->sun_path) - 2)
		n = sizeof(sun->sun_path) - 2;
	memcpy(sun->sun_path + 1, name, n);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Listens on the abstract socket @name for `seconds`, answering each connection with "hello". */
static int op_abstract_listen(char **a)
{
	struct sockaddr_un sun;
	socklen_t len = abstract_addr(a[0], &sun);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, len) < 0 || listen(fd, 8) < 0)
		return report_errno(errno);
	alarm((unsigned)(a[1] ? num(a[1]) : 10));
	printf("{\"op\":\"abstract-listen\",\"ok\":true}\n");
	fflush(stdout);
	for (;;) {
		int c = accept(fd, NULL, NULL);
		if (c >= 0) {
			(void)!write(c, "hello", 5);
			close(c);
		}
	}
}

static int op_abstract_connect(char **a)
{
	struct sockaddr_un sun;
	socklen_t len = abstract_addr(a[0], &sun);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return report_errno(errno);
	return report(connect(fd, (struct sockaddr *)&sun, len));
}

/* ---- resources ------------------------------------------------------------------------------------------- */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Forks sleeping children until fork fails or `max` is reached; reports how many and the errno that stopped it,
 * then kills them all so the sandbox is usable afterwards. */
static int op_forkbomb(char **a)
{
	long max = a[0] ? num(a[0]) : 100000;
	pid_t *kids = calloc((size_t)max, sizeof(pid_t));
	if (!kids) {
		begin(false);
		emit(",\"forked\":0,\"errno\":\"ENOMEM\"");
		return finish();
	}
	long n = 0;
	int stop = 0;
	while (n < max) {
		pid_t p = fork();
		if (p < 0) {
			stop = errno;
			break;
		}
		if (p == 0) {
			pause();
			_exit(0);
		}
		kids[n++] = p;
	}
	for (long i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	for (long i = 0; i < n; i++)
		waitpid(kids[i], NULL, 0);
	free(kids);
	begin(stop == 0);
	emit(",\"forked\":%ld", n);
	if (stop) {
		const char *name = strerrorname_np(stop);
		emit(",\"errno\":\"%s\"", name ? name : "?");
	}
	return finish();
}

/* Allocates and touches `mib` MiB, 1 MiB at a time; if it survives, reports how much it held. */
static int op_memhog(char **a)
{
	long mib = a[0] ? num(a[0]) : 1 << 20;
	long got = 0;
	for (; got < mib; got++) {
		char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			break;
		memset(p, 0x5a, 1 << 20);
	}
	begin(got == mib);
	emit(",\"mib\":%ld", got);
	return finish();
}

/* Writes 1 MiB chunks to path until a write fails or `max_mib` is reached; reports bytes and the errno. */
static int op_fill(char **a)
{
	long max = a[1] ? num(a[1]) : 1L << 30;
	int fd = open(a[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return report_errno(errno);
	static char chunk[1 << 20];
	memset(chunk, 0xa5, sizeof(chunk));
	long long written = 0;
	int e = 0;
	for (long i = 0; i < max; i++) {
		ssize_t n = write(fd, chunk, sizeof(chunk));
		if (n < 0) {
			e = errno;
			break;
		}
		written += n;
		if (n < (ssize_t)sizeof(chunk)) {
			n = write(fd, chunk, sizeof(chunk));
			e = n < 0 ? errno : 0;
			break;
		}
	}
	if (!e && fsync(fd) < 0)
		e = errno;
	begin(e == 0);
	emit(",\"bytes\":%lld", written);
	if (e) {
		const char *name = strerrorname_np(e);
		emit(",\"errno\":\"%s\"", name ? name : "?");
	}
	return finish();
}

/* Creates empty files DIR/f0, f1... until creation fails or `max` is reached; reports the count and the errno. */
static int op_files(char **a)
{
	long max = a[1] ? num(a[1]) : 10000000;
	long n = 0;
	int e = 0;
	for (; n < max; n++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/f%ld", a[0], n);
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			e = errno;
			break;
		}
		close(fd);
	}
	begin(e == 0);
	emit(",\"files\":%ld", n);
	if (e) {
		const char *name = strerrorname_np(e);
		emit(",\"errno\":\"%s\"", name ? name : "?");
	}
	return finish();
}

/* Spins `procs` processes for `seconds` of wall time; reports their CPU time per wall second. */
static int op_cpuspin(char **a)
{
	double secs = a[0] ? strtod(a[0], NULL) : 1.0;
	long procs = a[1] ? num(a[1]) : 1;
	double start = now();
	for (long i = 0; i < procs; i++)
		if (fork() == 0) {
			volatile unsigned long x = 0;
			while (now() - start < secs)
				for (int j = 0; j < 10000; j++)
					x++;
			_exit(0);
		}
	while (wait(NULL) > 0)
		;
	double wall = now() - start;
	struct rusage ru;
	getrusage(RUSAGE_CHILDREN, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		     (double)ru.ru_stime.tv_usec / 1e6;
	begin(true);
	emit(",\"wall\":%.3f,\"cpu\":%.3f,\"cpu_per_wall\":%.3f", wall, cpu, cpu / wall);
	return finish();
}

static int op_sleep(char **a)
{
	double s = a[0] ? strtod(a[0], NULL) : 1;
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
	nanosleep(&ts, NULL);
	return report(0);
}

/* Ignores SIGTERM (and SIGINT, SIGHUP) and sleeps forever: only SIGKILL ends it. */
static __attribute__((noreturn)) int op_ignore_term(char **a)
{
	(void)a;
	signal(SIGTERM, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	printf("{\"op\":\"ignore-term\",\"ok\":true,\"pid\":%d}\n", getpid());
	fflush(stdout);
	for (;;)
		pause();
}

/* Double-forks a daemon (setsid, stdio on /dev/null) that sleeps `seconds`, then returns at once. */
static int op_daemon(char **a)
{
	long secs = a[0] ? num(a[0]) : 3600;
	pid_t p = fork();
	if (p < 0)
		return report_errno(errno);
	if (p == 0) {
		setsid();
		if (fork() != 0)
			_exit(0);
		int fd = open("/dev/null", O_RDWR);
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		sleep((unsigned)secs);
		_exit(0);
	}
	waitpid(p, NULL, 0);
	return report(0);
}

/* Leaves a detached chain behind: in a new session, a process that forks and exits at once, its child doing the same,
 * for SECONDS (default 60), stdio on /dev/null; no pid of it lives long. Reports once the chain has made 100
 * generations, so it runs when the probe ends. */
static int op_forkchain(char **a)
{
	long secs = a[0] ? num(a[0]) : 60;
	int up[2];
	if (pipe(up) < 0)
		return report_errno(errno);
	pid_t p = fork();
	if (p < 0)
		return report_errno(errno);
	if (p == 0) {
		setsid();
		close(up[0]);
		int fd = open("/dev/null", O_RDWR);
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		time_t end = time(NULL) + secs;
		for (long gen = 0; time(NULL) < end;) {
			pid_t c = fork();
			if (c > 0)
				_exit(0);
			if (c == 0 && ++gen == 100) {
				if (write(up[1], "x", 1) < 0)
					_exit(1);
				close(up[1]);
			}
		}
		_exit(0);
	}
	close(up[1]);
	char x;
	ssize_t n = read(up[0], &x, 1);
	close(up[0]);
	waitpid(p, NULL, 0);
	return n == 1 ? report(0) : report_errno(EIO);
}

/* Writes `bytes` to stdout (or stderr when the second argument is "stderr") as fast as possible. */
static int op_flood(char **a)
{
	long long total = a[0] ? strtoll(a[0], NULL, 0) : 1LL << 30;
	int fd = a[1] && strcmp(a[1], "stderr") == 0 ? 2 : 1;
	static char chunk[65536];
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = (char)('a' + i % 26);
	for (long long done = 0; done < total;) {
		size_t n = total - done < (long long)sizeof(chunk) ? (size_t)(total - done) : sizeof(chunk);
		ssize_t w = write(fd, chunk, n);
		if (w < 0)
			return 1;
		done += w;
	}
	return 0;
}

/* ---- dispatch -------------------------------------------------------------------------------------------- */

static const struct op {
	const char *name;
	int min_args;
	int (*fn)(char **);
	const char *usage;
} ops[] = {
	{ "open", 1, op_open, "PATH [rdonly,wronly,rdwr,creat,trunc,append,excl,dir,path,nofollow,tmpfile]" },
	{ "read", 1, op_read, "PATH [MAXBYTES]" },
	{ "write", 1, op_write, "PATH [DATA]  (O_CREAT|O_TRUNC)" },
	{ "truncate", 2, op_truncate, "PATH LEN" },
	{ "unlink", 1, op_unlink, "PATH" },
	{ "rmdir", 1, op_rmdir, "PATH" },
	{ "mkdir", 1, op_mkdir, "PATH" },
	{ "rename", 2, op_rename, "FROM TO" },
	{ "link", 2, op_link, "TARGET NEWPATH" },
	{ "symlink", 2, op_symlink, "TARGET NEWPATH" },
	{ "mknod", 2, op_mknod, "PATH c|b|p|s [MAJOR MINOR]" },
	{ "chmod", 2, op_chmod, "PATH OCTALMODE" },
	{ "chown", 3, op_chown, "PATH UID GID" },
	{ "setxattr", 3, op_setxattr, "PATH NAME VALUE" },
	{ "utime", 1, op_utime, "PATH" },
	{ "stat", 1, op_stat, "PATH (lstat)" },
	{ "statfs", 1, op_statfs, "PATH" },
	{ "ls", 1, op_ls, "DIR" },
	{ "readlink", 1, op_readlink, "PATH" },
	{ "exec", 1, op_exec, "PATH [ARGV1...]  (argv[0] = PATH)" },
	{ "status", 0, op_status, "ids, capabilities, securebits, no_new_privs, seccomp, dumpable, core limit, env" },
	{ "fds", 0, op_fds, "open descriptors and their targets" },
	{ "setuid", 1, op_setuid, "UID" },
	{ "setgid", 1, op_setgid, "GID" },
	{ "setgroups", 1, op_setgroups, "GID" },
	{ "capset", 0, op_capset, "try to raise every capability" },
	{ "securebits", 1, op_securebits, "VALUE" },
	{ "setsid", 0, op_setsid, "" },
	{ "sethostname", 1, op_sethostname, "NAME" },
	{ "mount", 3, op_mount, "SRC TARGET FSTYPE [FLAGS [DATA]]" },
	{ "umount", 1, op_umount, "TARGET [FLAGS]" },
	{ "pivot_root", 2, op_pivot_root, "NEW PUT_OLD" },
	{ "chroot", 1, op_chroot, "DIR" },
	{ "chroot-escape", 0, op_chroot_escape, "[JAILDIR]" },
	{ "fsopen", 0, op_fsopen, "[FSTYPE]" },
	{ "open_tree", 1, op_open_tree, "PATH" },
	{ "unshare", 1, op_unshare, "user,mnt,pid,net,ipc,uts,cgroup,time|HEX" },
	{ "setns", 1, op_setns, "NSFILE" },
	{ "clone", 0, op_clone, "[NSFLAGS]" },
	{ "clone3", 0, op_clone3, "[NSFLAGS]" },
	{ "kill", 1, op_kill, "PID [SIG]" },
	{ "ptrace-attach", 1, op_ptrace_attach, "PID" },
	{ "ptrace-traceme", 0, op_ptrace_traceme, "" },
	{ "process_vm_readv", 0, op_pvm_read, "[PID [ADDR]]" },
	{ "process_vm_writev", 0, op_pvm_write, "[PID [ADDR]]" },
	{ "pidfd_open", 1, op_pidfd_open, "PID" },
	{ "pidfd_getfd", 0, op_pidfd_getfd, "[PID]" },
	{ "ps", 0, op_ps, "processes visible in /proc" },
	{ "open_by_handle_at", 0, op_open_by_handle_at, "[PATH]" },
	{ "keyctl", 0, op_keyctl, "" },
	{ "add_key", 0, op_add_key, "" },
	{ "bpf", 0, op_bpf, "" },
	{ "perf_event_open", 0, op_perf_event_open, "" },
	{ "io_uring_setup", 0, op_io_uring, "" },
	{ "userfaultfd", 0, op_userfaultfd, "" },
	{ "personality", 1, op_personality, "VALUE" },
	{ "iopl", 0, op_iopl, "" },
	{ "syscall", 1, op_syscall, "NR [ARGS...]" },
	{ "syscall-child", 1, op_syscall_child, "NR  (in a child; reports a killing signal)" },
	{ "int80", 0, op_int80, "[I386_NR]  (in a child)" },
	{ "x32", 0, op_x32, "[NR]  (in a child)" },
	{ "landlock-abi", 0, op_landlock_abi, "" },
	{ "socket", 1, op_socket, "FAMILY [TYPE [PROTO]]  (unix inet inet6 netlink packet vsock alg key | N)" },
	{ "tcp-connect", 2, op_tcp_connect, "ADDR PORT" },
	{ "tcp-bind", 1, op_tcp_bind, "PORT [ADDR]" },
	{ "udp-send", 2, op_udp_send, "ADDR PORT" },
	{ "abstract-listen", 1, op_abstract_listen, "NAME [SECONDS]" },
	{ "abstract-connect", 1, op_abstract_connect, "NAME" },
	{ "forkbomb", 0, op_forkbomb, "[MAX]" },
	{ "memhog", 0, op_memhog, "[MIB]" },
	{ "fill", 1, op_fill, "PATH [MAX_MIB]" },
	{ "files", 1, op_files, "DIR [MAX]  (inode exhaustion)" },
	{ "cpuspin", 0, op_cpuspin, "[SECONDS [PROCS]]" },
	{ "sleep", 0, op_sleep, "[SECONDS]" },
	{ "ignore-term", 0, op_ignore_term, "" },
	{ "daemon", 0, op_daemon, "[SECONDS]" },
	{ "forkchain", 0, op_forkchain, "[SECONDS]  (a detached chain of processes that fork and exit at once)" },
	{ "flood", 0, op_flood, "[BYTES [stderr]]" },
};

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "help") == 0) {
		for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
			printf("%-18s %s\n", ops[i].name, ops[i].usage);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strcmp(argv[1], ops[i].name) == 0) {
			if (argc - 2 < ops[i].min_args) {
				fprintf(stderr, "usage: %s %s %s\n", argv[0], ops[i].name, ops[i].usage);
				return 2;
			}
			op_name = ops[i].name;
			return ops[i].fn(argv + 2);
		}
	fprintf(stderr, "%s: unknown operation %s (try help)\n", argv[0], argv[1]);
	return 2;
}
