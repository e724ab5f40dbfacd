/* daemon.c — owns the `tpuflow daemon` process: the lock that makes it the only daemon of its
 * home, HOME/daemon.json, the wake socket, signals, the systemd notify protocol, the HTTP
 * server (web/http.c) and the periodic jobs that drive runs (orchestrator/runner.h).
 *
 * One thread runs the main loop: poll() on a signalfd (SIGTERM, SIGINT, SIGHUP) and the wake
 * socket HOME/daemon.sock, with a timeout up to the next due periodic job. The periodic jobs
 * are a table of named periods in the manner of Redis's serverCron: adding one is one line.
 * Runs are driven by engine handles (a coordinator thread each) whose steps all run on the
 * runner's one worker pool; the main thread only starts, reaps and drains them.
 *
 * Cron schedules (orchestrator/schedules.h) fire from the `schedules` job: a fired run is
 * created pending and taken like any submitted run.
 *
 * Configuration: the command line (home, listen address, grace) and HOME/daemon.conf, lines of
 * KEY=VALUE read at start and again on SIGHUP: max_runs (runs driven at once, default 4),
 * workers (steps at once per run, default 8), pool (steps at once across all runs: the shared
 * worker pool's threads, default 8, fixed once the first run started), max_conns_per_ip (the
 * API's connections from one address, read at start; --max-conns-per-ip wins), log
 * (debug|info|warn|error). */
#include "web/daemon.h"
#include "orchestrator/alerts.h"
#include "orchestrator/pipeline.h"
#include "orchestrator/runner.h"
#include "orchestrator/schedules.h"
#include "orchestrator/state.h"
#include "web/server.h"

#define TF_LOG_TAG "daemon"
#include "common/common.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef TF_VERSION
#define TF_VERSION "0"
#endif

/* Retry-After, in seconds, of a request to start a run that a draining daemon refuses: soon
 * enough for a client to reach the daemon that comes next (a service manager restarts it),
 * the same whatever --grace is, since a drain with nothing running ends at once. */
#define DRAIN_RETRY_AFTER 5

struct daemon {
	const struct tf_daemon_opts *o;
	char *home;
	struct tf_runner *runner;
	struct tf_store *db; /* the main thread's handle (schedules) */
	struct tf_web *web;
	struct tf_alerts_worker *alerts; /* delivers the home's alerts (NULL: no hooks yet) */
	int lock_fd, wake_fd, sig_fd;
	int wake;              /* a datagram arrived: look for runs now */
	unsigned conf_conns_per_ip; /* daemon.conf's max_conns_per_ip (0: not given) */
	volatile int stopping; /* SIGTERM/SIGINT seen (read by /readyz on server threads) */
	char listen[160];
};

/* ---- systemd's notify protocol (sd_notify(3)): one datagram to $NOTIFY_SOCKET ---------- */

static void notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (!path || !*path)
		return;
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t n = strlen(path);
	if (n >= sizeof(a.sun_path) || (path[0] != '/' && path[0] != '@'))
		return;
	memcpy(a.sun_path, path, n);
	if (path[0] == '@')
		a.sun_path[0] = '\0'; /* an abstract socket name */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&a,
	           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
		tf_warn("cannot notify the service manager (%s): %s", path, strerror(errno));
	close(fd);
}

/* ---- configuration -------------------------------------------------------------------- */

static int set_log_level(const char *name)
{
	static const char *const names[] = {"debug", "info", "warn", "error"};
	for (size_t i = 0; i < TF_ARRAY_LEN(names); i++)
		if (!strcmp(name, names[i])) {
			tf_log_threshold = (enum tf_log_level)i;
			return 0;
		}
	return -EINVAL;
}

static void read_config(struct daemon *d)
{
	char *path = tf_xasprintf("%s/daemon.conf", d->home), *text = NULL;
	size_t len = 0;
	int max_runs = 0, workers = 0, pool = 0;
	if (tf_read_file(path, 1 << 16, &text, &len) == 0) {
		int line = 0;
		char *save = NULL;
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			line++;
			while (*l == ' ' || *l == '\t')
				l++;
			if (!*l || *l == '#')
				continue;
			char *eq = strchr(l, '=');
			long long v = 0;
			char *end = NULL;
			if (eq) {
				*eq = '\0';
				v = strtoll(eq + 1, &end, 10);
			}
			if (eq && !strcmp(l, "max_runs") && end != eq + 1 && !*end && v >= 1 &&
			    v <= 1024)
				max_runs = (int)v;
			else if (eq && !strcmp(l, "workers") && end != eq + 1 && !*end && v >= 1 &&
			         v <= 1024)
				workers = (int)v;
			else if (eq && !strcmp(l, "pool") && end != eq + 1 && !*end && v >= 1 &&
			         v <= 1024)
				pool = (int)v;
			else if (eq && !strcmp(l, "max_conns_per_ip") && end != eq + 1 && !*end &&
			         v >= 1 && v <= TF_WEB_CONNS)
				d->conf_conns_per_ip = (unsigned)v;
			else if (eq && !strcmp(l, "log") && set_log_level(eq + 1) == 0)
				;
			else
				tf_warn(
				    "%s:%d: ignored (expected max_runs=1..1024, workers=1..1024, "
				    "pool=1..1024, max_conns_per_ip=1..%d or log=debug|info|warn|error)",
				    path, line, TF_WEB_CONNS);
		}
	}
	free(text);
	free(path);
	if (d->runner)
		tf_runner_set_limits(d->runner, max_runs, workers, pool);
	tf_info("configuration: max_runs=%d workers=%d pool=%d", max_runs ? max_runs : 4,
	        workers ? workers : 8, pool ? pool : TF_RUNNER_POOL_DEFAULT);
}

/* ---- the home: lock, daemon.json, wake socket ------------------------------------------ */

static int take_lock(struct daemon *d, char *err, size_t errlen)
{
	char *path = tf_xasprintf("%s/%s", d->home, TF_DAEMON_LOCK);
	d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	int rc = 0;
	if (d->lock_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open '%s': %s", path, strerror(-rc));
	} else if (flock(d->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		struct tf_daemon_info info = {0};
		tf_daemon_find(d->home, &info);
		snprintf(err, errlen,
		         "another daemon (pid %ld, http://%s) already serves the state home '%s'; "
		         "stop it first (kill -TERM %ld) or use another --home",
		         info.pid, info.listen[0] ? info.listen : "?", d->home, info.pid);
	}
	free(path);
	return rc;
}

/* daemon.json, written to a temporary file and renamed over, so a reader sees all or none. */
static int write_info(struct daemon *d, char *err, size_t errlen)
{
	char *path = tf_xasprintf("%s/%s", d->home, TF_DAEMON_JSON);
	char *tmp = tf_xasprintf("%s.tmp.%ld", path, (long)getpid());
	json_t *j = json_pack("{s:s, s:I, s:s, s:f, s:s, s:s}", "listen", d->listen, "pid",
	                      (json_int_t)getpid(), "version", TF_VERSION, "started_at",
	                      tf_now_wall(), "url", "", "wake_socket", TF_DAEMON_SOCK);
	char url[200];
	snprintf(url, sizeof(url), "%s://%s", d->o->tls_cert ? "https" : "http", d->listen);
	json_object_set_new(j, "url", json_string(url));
	int rc = json_dump_file(j, tmp, JSON_INDENT(2)) ? -EIO : 0;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc) {
		snprintf(err, errlen, "cannot write '%s': %s", path, strerror(-rc));
		unlink(tmp);
	}
	json_decref(j);
	free(tmp);
	free(path);
	return rc;
}

static int open_wake(struct daemon *d, char *err, size_t errlen)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int n = snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", d->home, TF_DAEMON_SOCK);
	if (n < 0 || (size_t)n >= sizeof(a.sun_path)) {
		snprintf(err, errlen, "the state home path '%s' is too long for a unix socket",
		         d->home);
		return -ENAMETOOLONG;
	}
	unlink(a.sun_path); /* a leftover of a daemon that died: we hold the lock */
	d->wake_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (d->wake_fd < 0 || bind(d->wake_fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int rc = -errno;
		snprintf(err, errlen, "cannot bind '%s': %s", a.sun_path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* ---- the HTTP API's hooks ------------------------------------------------------------- */

static int hook_submit(void *ctx, struct tf_store *st, const struct tf_web_submit *s,
                       char run_id[32], struct tf_diag_list *diags, char *err, size_t errlen)
{
	struct daemon *d = ctx;
	json_t *pj = s->params_json ? json_loads(s->params_json, 0, NULL) : NULL;
	size_t nov;
	struct tf_param_override *ov = tf_param_overrides_from_json(pj, &nov);
	/* diagnostics name the pipeline: registered by name, or the text's own `name:` */
	char *named = s->pipeline ? NULL : tf_pipeline_peek_name(s->yaml, s->yaml_len);
	struct tf_engine_submit sub = {.path = s->pipeline ? s->pipeline : named ? named : "request",
	                               .yaml = s->yaml,
	                               .yaml_len = s->yaml_len,
	                               .ov = ov,
	                               .nov = nov,
	                               .trigger = "api",
	                               .has_priority = s->priority >= 0,
	                               .priority = s->priority,
	                               .project = s->project};
	int rc = tf_engine_submit(st, d->home, &sub, run_id, diags, err, errlen);
	free(named);
	free(ov);
	json_decref(pj);
	return rc;
}

static int hook_cancel(void *ctx, struct tf_store *st, const char *run, char *err, size_t errlen)
{
	(void)ctx;
	enum tf_run_state state;
	int rc = tf_run_request_cancel(st, run, &state);
	if (rc == -ENOENT)
		snprintf(err, errlen, "no run '%s'", run);
	else if (rc)
		snprintf(err, errlen, "%s", tf_store_errmsg(st));
	return rc;
}

static int continue_run(struct tf_store *st, const char *run, int retry, char new_run[32],
                        char *err, size_t errlen)
{
	int rc = tf_run_mark_resume(st, run, retry, err, errlen);
	if (rc == 0)
		snprintf(new_run, 32, "%s", run);
	return rc;
}

static int hook_retry(void *ctx, struct tf_store *st, const char *run, char new_run[32], char *err,
                      size_t errlen)
{
	(void)ctx;
	return continue_run(st, run, 1, new_run, err, errlen);
}

static int hook_resume(void *ctx, struct tf_store *st, const char *run, char new_run[32], char *err,
                       size_t errlen)
{
	(void)ctx;
	return continue_run(st, run, 0, new_run, err, errlen);
}

static void hook_wake(void *ctx)
{
	struct daemon *d = ctx;
	tf_daemon_wake(d->home); /* from a server thread: through the socket to the main loop */
}

static int hook_ready(void *ctx)
{
	struct daemon *d = ctx;
	return !d->stopping;
}

/* ---- periodic jobs (named periods, like Redis's serverCron) ----------------------------- */

static void job_runs(struct daemon *d)
{
	tf_runner_reap(d->runner);
	if (!d->stopping)
		tf_runner_poll(d->runner);
}

static void job_reap(struct daemon *d)
{
	tf_runner_reap(d->runner);
}

/* `concurrency: replace`: the run to replace is asked to stop like `runs cancel` does (inside
 * the firing transaction, on the same handle). */
static int schedule_cancel(void *ctx, const char *run)
{
	struct daemon *d = ctx;
	enum tf_run_state state;
	return tf_run_request_cancel(d->db, run, &state);
}

static void job_schedules(struct daemon *d)
{
	if (d->stopping)
		return;
	struct tf_schedule_hooks hooks = {.cancel = schedule_cancel, .ctx = d};
	json_t *report = NULL, *t;
	size_t i;
	if (tf_schedules_fire_due(d->db, tf_now_wall(), &hooks, &report)) {
		tf_warn("schedules: %s", tf_store_errmsg(d->db));
		return;
	}
	json_array_foreach(report, i, t)
	{
		const char *run = json_string_value(json_object_get(t, "run"));
		tf_info("schedule %s: %s%s%s", json_string_value(json_object_get(t, "fire_key")),
		        json_string_value(json_object_get(t, "outcome")), run ? " as run " : "",
		        run ? run : "");
		if (run)
			d->wake = 1;
	}
	json_decref(report);
}

/* Alerts are sent by a thread of their own (a POST may take seconds); this job starts it
 * once the home has hooks and wakes it. */
static void job_alerts(struct daemon *d)
{
	if (!d->alerts)
		d->alerts = tf_alerts_worker_start(d->home);
	tf_alerts_worker_kick(d->alerts);
}

static const struct cron_job {
	const char *name;
	double period; /* seconds */
	void (*fn)(struct daemon *d);
} cron_jobs[] = {
    {"runs", 1.0, job_runs},           /* take submitted and orphaned runs (and on a wake) */
    {"reap", 0.2, job_reap},           /* free the engines of runs that ended */
    {"schedules", 1.0, job_schedules}, /* fire due cron ticks (orchestrator/schedules.h) */
    {"alerts", 1.0, job_alerts},       /* deliver alerts (orchestrator/alerts.h) */
};

/* Runs the jobs that are due; returns the seconds until the next one is. */
static double cron(struct daemon *d, double *last)
{
	double now = tf_now_monotonic(), next = 3600;
	for (size_t i = 0; i < TF_ARRAY_LEN(cron_jobs); i++) {
		if (now - last[i] >= cron_jobs[i].period) {
			cron_jobs[i].fn(d);
			last[i] = now;
		}
		double t = last[i] + cron_jobs[i].period - now;
		if (t < next)
			next = t;
	}
	return next > 0 ? next : 0;
}

/* daemon.json is removed by a daemon that exits cleanly: one found at start was left by a
 * daemon that was killed or crashed (or a machine that went down). */
static void alert_unclean_stop(struct daemon *d)
{
	char *path = tf_xasprintf("%s/%s", d->home, TF_DAEMON_JSON);
	json_t *prev = json_load_file(path, 0, NULL);
	free(path);
	if (!prev)
		return;
	char msg[300];
	snprintf(msg, sizeof(msg),
	         "the previous daemon of %s (pid %lld) did not stop cleanly; its runs are adopted",
	         d->home, (long long)json_integer_value(json_object_get(prev, "pid")));
	tf_warn("%s", msg);
	json_t *x = json_pack("{s:s, s:O?}", "home", d->home, "previous",
	                      json_object_get(prev, "pid"));
	if (tf_alerts_emit(d->db, "daemon_unclean_stop", NULL, NULL, msg, x))
		tf_warn("alerts: %s", tf_store_errmsg(d->db));
	json_decref(x);
	json_decref(prev);
}

/* ---- the main loop ---------------------------------------------------------------------- */

static void on_signal(struct daemon *d)
{
	struct signalfd_siginfo si;
	while (read(d->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			tf_info("SIGHUP: re-reading %s/daemon.conf", d->home);
			read_config(d);
		} else if (!d->stopping) {
			tf_info("%s: draining (grace %.0f s)", strsignal((int)si.ssi_signo),
			        d->o->grace > 0 ? d->o->grace : 30);
			d->stopping = 1;
			tf_web_drain(d->web, DRAIN_RETRY_AFTER); /* no new runs from the API */
		}
	}
}

static void on_wake(struct daemon *d)
{
	char buf[64];
	while (recv(d->wake_fd, buf, sizeof(buf), 0) >= 0)
		d->wake = 1;
}

int tf_daemon_run(const struct tf_daemon_opts *o, char *err, size_t errlen)
{
	struct daemon d = {.o = o, .lock_fd = -1, .wake_fd = -1, .sig_fd = -1};
	int rc;
	const char *h = o->home ? o->home : ".tpuflow";
	tf_mkdir_p(h);
	d.home = realpath(h, NULL);
	if (!d.home)
		d.home = tf_xstrdup(h);
	snprintf(d.listen, sizeof(d.listen), "%s", o->listen ? o->listen : "127.0.0.1:8470");

	/* signals are taken by the signalfd: blocked before any thread starts, so every thread
	 * (engines, the HTTP server) inherits the mask */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	d.sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (d.sig_fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "signalfd: %s", strerror(-rc));
		goto out;
	}
	rc = take_lock(&d, err, errlen);
	if (rc)
		goto out;
	rc = tf_store_open_home(d.home, &d.db, err, errlen); /* migrates */
	if (rc)
		goto out;
	alert_unclean_stop(&d);
	/* a step's process stopped by a drain, a preemption or a cancel gets the whole grace to
	 * write its checkpoint before SIGKILL */
	struct tf_runner_opts ro = {.home = d.home, .grace = o->grace > 0 ? o->grace : 30};
	d.runner = tf_runner_new(&ro, err, errlen);
	if (!d.runner) {
		rc = -EIO;
		goto out;
	}
	read_config(&d);
	rc = open_wake(&d, err, errlen);
	if (rc)
		goto out;
	struct tf_web_opts wo = {.home = d.home,
	                         .listen = d.listen,
	                         .auth = o->auth_none ? TF_WEB_AUTH_NONE : TF_WEB_AUTH_TOKENS,
	                         .tls_cert = o->tls_cert,
	                         .tls_key = o->tls_key,
	                         .insecure_http = o->insecure_http,
	                         .max_conns_per_ip = o->max_conns_per_ip ? o->max_conns_per_ip
	                                                                 : d.conf_conns_per_ip,
	                         .hooks = {.ctx = &d,
	                                   .submit = hook_submit,
	                                   .cancel = hook_cancel,
	                                   .retry = hook_retry,
	                                   .resume = hook_resume,
	                                   .wake = hook_wake,
	                                   .ready = hook_ready}};
	rc = tf_web_start(&wo, &d.web, err, errlen);
	if (rc)
		goto out;
	/* the address as bound (port 0 asks for any free one) */
	char host[128];
	const char *colon = strrchr(d.listen, ':');
	snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - d.listen) : 0, d.listen);
	snprintf(d.listen, sizeof(d.listen), "%s:%d", host[0] ? host : "127.0.0.1",
	         tf_web_port(d.web));
	rc = write_info(&d, err, errlen);
	if (rc)
		goto out;
	tf_info("serving state home %s on %s://%s (pid %ld, version %s)", d.home,
	        o->tls_cert ? "https" : "http", d.listen, (long)getpid(), TF_VERSION);
	notify("READY=1");

	double last[TF_ARRAY_LEN(cron_jobs)] = {0};
	while (!d.stopping) {
		double wait = cron(&d, last);
		if (d.wake) {
			d.wake = 0;
			job_runs(&d);
		}
		struct pollfd pf[2] = {{.fd = d.sig_fd, .events = POLLIN},
		                       {.fd = d.wake_fd, .events = POLLIN}};
		int n = poll(pf, 2, (int)(wait * 1000) + 1);
		if (n > 0 && (pf[0].revents & POLLIN))
			on_signal(&d);
		if (n > 0 && (pf[1].revents & POLLIN))
			on_wake(&d);
	}
	notify("STOPPING=1");
	double grace = o->grace > 0 ? o->grace : 30, t0 = tf_now_monotonic();
	int left = tf_runner_drain(d.runner, grace);
	if (left)
		tf_warn("%d run(s) did not stop within %.0f s; the next daemon adopts them", left,
		        grace);
	else
		tf_info("drained; exiting");
	/* The API's event streams and followed logs went on through the drain (their clients
	 * see the runs interrupted); now they end cleanly within what is left of the grace, at
	 * least a second, before the server goes. */
	double rest = grace - (tf_now_monotonic() - t0);
	int open_streams = tf_web_end_streams(d.web, rest > 1 ? rest : 1);
	if (open_streams)
		tf_warn("%d API stream(s) did not end in time; their connections are cut",
		        open_streams);
	tf_web_stop(d.web);
	d.web = NULL;
	tf_alerts_worker_stop(d.alerts, 2.0, NULL); /* what is left waits for the next one */
	d.alerts = NULL;
	if (left == 0)
		tf_runner_free(d.runner); /* else: their threads end with the process */
	d.runner = NULL;
	rc = 0;
	char *p = tf_xasprintf("%s/%s", d.home, TF_DAEMON_JSON);
	unlink(p);
	free(p);
	p = tf_xasprintf("%s/%s", d.home, TF_DAEMON_SOCK);
	unlink(p);
	free(p);
out:
	tf_alerts_worker_stop(d.alerts, 0, NULL);
	tf_web_stop(d.web);
	if (rc)
		tf_runner_free(d.runner);
	if (d.wake_fd >= 0)
		close(d.wake_fd);
	if (d.sig_fd >= 0)
		close(d.sig_fd);
	tf_store_close(d.db);
	if (d.lock_fd >= 0)
		close(d.lock_fd);
	free(d.home);
	return rc;
}
