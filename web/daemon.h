/* daemon.h — `tpuflow daemon`: the long-running process that drives every run submitted on a
 * state home and serves the HTTP API (docs/daemon.md). */
#ifndef TF_WEB_DAEMON_H
#define TF_WEB_DAEMON_H

#include <stddef.h>

struct tf_daemon_opts {
	const char *home;   /* state home (created and migrated) */
	const char *listen; /* HTTP address HOST:PORT (default 127.0.0.1:8470; port 0: any) */
	double grace;       /* seconds a SIGTERM drain waits for running steps (0: 30) */
	int auth_none;      /* serve the API without bearer tokens (loopback tests) */
	const char *tls_cert, *tls_key; /* PEM files: both set = HTTPS (web/server.h) */
	int insecure_http; /* plain HTTP on a non-loopback address (TLS ends in front) */
	unsigned max_conns_per_ip; /* the API's connections from one address, 1..TF_WEB_CONNS
	                              (0: daemon.conf's max_conns_per_ip, else
	                              TF_WEB_CONNS_PER_IP) */
};

/* Runs the daemon in the foreground until SIGTERM or SIGINT, then drains and returns 0.
 * -EBUSY when another daemon serves the home (err names it; exit 75), another negative errno
 * when it cannot start (err says why). */
int tf_daemon_run(const struct tf_daemon_opts *o, char *err, size_t errlen);

#endif
