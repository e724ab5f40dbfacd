/* httpbench.h — what the HTTP benchmarks share: the HTTP floor (a minimal libmicrohttpd
 * handler answering a fixed body, after reading and dropping any request body) and a wrk run
 * parsed into requests/s and p50/p99 latency. Included by one bench program each (bench/api.c,
 * bench/serve.c); every bench program is its own file, so this is a header of static functions. */
#ifndef TF_BENCH_HTTPBENCH_H
#define TF_BENCH_HTTPBENCH_H

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the HTTP floor ------------------------------------------------------------------- */

static char *floor_body; /* the floor's fixed answer, set by the caller */
static size_t floor_len;
static char floor_mark;

static enum MHD_Result floor_handler(void *cls, struct MHD_Connection *c, const char *url,
                                     const char *method, const char *version, const char *up,
                                     size_t *up_size, void **con_cls)
{
	(void)cls, (void)url, (void)method, (void)version, (void)up;
	if (!*con_cls) { /* first call: headers only */
		*con_cls = &floor_mark;
		return MHD_YES;
	}
	if (*up_size) { /* the body, taken and dropped */
		*up_size = 0;
		return MHD_YES;
	}
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(floor_len, floor_body, MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(r, "Content-Type", "application/json");
	enum MHD_Result ret = MHD_queue_response(c, 200, r);
	MHD_destroy_response(r);
	return ret;
}

/* Runs wrk with 2 threads (1 for 1 connection; with a Lua script when script is not NULL, a
 * bearer token when token is not NULL); returns requests/s (0 when wrk failed or saw errors),
 * p50 and p99 in ms. */
static double bench_wrk(const char *url, const char *token, const char *script, int conns, int secs,
                        double *p50, double *p99)
{
	char out[] = "/tmp/tpuflow-bench-wrk.XXXXXX";
	int fd = mkstemp(out);
	if (fd < 0)
		return 0;
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "wrk -t%d -c%d -d%ds --latency %s%s%s %s%s%s '%s' > '%s' 2>&1",
	         conns < 2 ? 1 : 2, conns, secs, token ? "-H 'Authorization: Bearer " : "", token ? token : "",
	         token ? "'" : "", script ? "-s '" : "", script ? script : "", script ? "'" : "",
	         url, out);
	int rc = system(cmd);
	double rps = 0;
	*p50 = *p99 = 0;
	FILE *f = fdopen(fd, "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		double v;
		char unit[8];
		if (sscanf(line, "Requests/sec: %lf", &v) == 1)
			rps = v;
		double *to = strstr(line, " 50%") ? p50 : strstr(line, " 99%") ? p99 : NULL;
		if (to && sscanf(line, " %*d%% %lf%7s", &v, unit) == 2)
			*to = !strcmp(unit, "us") ? v / 1000 : !strcmp(unit, "s") ? v * 1000 : v;
		if (strstr(line, "Non-2xx") || strstr(line, "Socket errors")) {
			fprintf(stderr, "bench: wrk saw errors: %s", line);
			rps = 0;
		}
	}
	if (f)
		fclose(f);
	unlink(out);
	return rc == 0 ? rps : 0;
}

#endif
