/*
 * socket.c — the API socket: a Unix socket the core creates, in a directory root owns, and hands to the API process.
 *
 * Runs in the core (root) at start and whenever the API process is replaced, on one thread at a time (main.c, then
 * api_proc.c's watcher). The core keeps no copy of the listening socket once the API process has it.
 *
 * Who may connect: the socket is root:<socket_group> mode 0660 inside a directory that no "other" user can enter; the
 * API process checks each request's peer (SO_PEERCRED) against allowed_uids/allowed_gids.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core.h"
#include "lb/cleanup.h"
#include "lb/fileio.h"

/* Creates the socket's directory (root:group 0750) when missing and refuses one that others can enter. */
static int prepare_socket_dir(const char *sock_path, gid_t gid, struct lb_error *err)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	snprintf(dir, sizeof(dir), "%s", sock_path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return lb_error_setx(err, EINVAL, "socket path %s must be inside a directory of its own", sock_path);
	*slash = '\0';
	struct stat st;
	if (stat(dir, &st) < 0) {
		int r = lb_mkdir_p(dir, 0750);
		if (r < 0)
			return lb_error_set(err, r, "creating socket directory %s", dir);
		/* Safe: we just created this directory; root owns it and only the API group may enter it. */
		if (chown(dir, 0, gid) < 0)
			return lb_error_set(err, errno, "chown %s", dir);
		if (chmod(dir, 0750) < 0)
			return lb_error_set(err, errno, "chmod %s", dir);
		if (stat(dir, &st) < 0)
			return lb_error_set(err, errno, "stat %s", dir);
	}
	if (!S_ISDIR(st.st_mode))
		return lb_error_setx(err, ENOTDIR, "socket directory %s is not a directory", dir);
	if (st.st_mode & 0007)
		return lb_error_setx(err, EPERM,
				     "socket directory %s is accessible to every user (mode %04o); give lensboxd a "
				     "directory of its own (root, mode 0750)",
				     dir, (unsigned)(st.st_mode & 07777));
	if (st.st_uid != 0)
		return lb_error_setx(err, EPERM, "socket directory %s must be owned by root", dir);
	return 0;
}

int lbd_socket_create(const struct lbd_config *cfg, struct lb_error *err)
{
	gid_t gid = 0;
	if (cfg->socket_group[0] && strcmp(cfg->socket_group, "root") != 0) {
		struct group gr, *res = NULL;
		char buf[4096];
		if (getgrnam_r(cfg->socket_group, &gr, buf, sizeof(buf), &res) != 0 || !res)
			return lb_error_setx(err, ENOENT, "socket_group `%s` does not exist", cfg->socket_group);
		gid = gr.gr_gid;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(cfg->socket_path) >= sizeof(sa.sun_path))
		return lb_error_setx(err, ENAMETOOLONG, "socket path %s is too long", cfg->socket_path);
	int r = prepare_socket_dir(cfg->socket_path, gid, err);
	if (r < 0)
		return r;
	memcpy(sa.sun_path, cfg->socket_path, strlen(cfg->socket_path) + 1);
	struct stat st;
	if (lstat(cfg->socket_path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return lb_error_setx(err, EEXIST, "%s exists and is not a socket", cfg->socket_path);
		/* A socket left by a previous instance (a crash); the directory is ours, so this is its. */
		if (unlink(cfg->socket_path) < 0)
			return lb_error_set(err, errno, "removing stale socket %s", cfg->socket_path);
	}
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return lb_error_set(err, errno, "socket");
	/* Bound with the process's umask (0022, main.c): 0755, and connecting needs write permission, so only root can
	 * connect until the chmod below opens it to the group. The umask is not narrowed around the bind: it belongs
	 * to the whole process, and threads that start sandboxes (the spares', connection threads) create files and
	 * directories the sandbox's uid must read meanwhile (this runs again whenever the API process is restarted). */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return lb_error_set(err, errno, "binding %s", cfg->socket_path);
	/* Safe: the path is the socket we just bound in a root-owned directory others cannot enter. */
	if (chown(cfg->socket_path, 0, gid) < 0)
		return lb_error_set(err, errno, "chown %s", cfg->socket_path);
	if (chmod(cfg->socket_path, 0660) < 0)
		return lb_error_set(err, errno, "chmod %s", cfg->socket_path);
	if (listen(fd, 1024) < 0)
		return lb_error_set(err, errno, "listen on %s", cfg->socket_path);
	return TAKE_FD(fd);
}
