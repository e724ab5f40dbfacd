/* fuzz_api.c — libFuzzer target for the REST API's request path without the socket: the
 * router (path patterns, percent-decoding, custom verbs, 404/405), the JSON body checks and
 * the handlers behind them, on a real state database in a temporary home. Any request must
 * get an answer with a status, and every non-2xx answer must be a problem document whose
 * status is the answer's (model serving's routes: their clients' {"error": "..."}), also when
 * the request's path is not UTF-8.
 *
 * Input layout: byte 0 picks the method, byte 1 the content type, then the path up to the
 * first newline, then the body. Run by `make fuzz` (scripts/fuzz.sh).
 */
#include "orchestrator/pipeline.h"
#include "web/api.h"
#include "web/server.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct tf_web *srv;
static char home[] = "/tmp/tpuflow-fuzz-api.XXXXXX";

static void cleanup(void)
{
	tf_web_stop(srv);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	if (system(cmd))
		fprintf(stderr, "fuzz_api: could not remove %s\n", home);
}

/* Checks the pipeline as a submission would, and refuses it: nothing is written. */
static int submit(void *ctx, struct tf_store *st, const struct tf_web_submit *s, char run_id[32],
                  struct tf_diag_list *diags, char *err, size_t errlen)
{
	(void)ctx, (void)st, (void)run_id;
	struct tf_pipeline *p = NULL;
	if (s->yaml && !tf_pipeline_load_buffer("fuzz.yaml", s->yaml, s->yaml_len, NULL, 0, 0, &p,
	                                        diags))
		tf_pipeline_free(p);
	snprintf(err, errlen, "refused by the fuzz target");
	return -EINVAL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv) {
		char err[256];
		if (!mkdtemp(home))
			abort();
		atexit(cleanup);
		struct tf_web_opts o = {.home = home, .listen = "127.0.0.1:0",
		                        .auth = TF_WEB_AUTH_NONE, .hooks = {.submit = submit}};
		if (tf_web_start(&o, &srv, err, sizeof(err))) {
			fprintf(stderr, "fuzz_api: %s\n", err);
			abort();
		}
	}
	if (size < 2)
		return 0;
	static const char *const methods[] = {"GET", "POST", "DELETE", "PUT", "HEAD"};
	static const char *const types[] = {"application/json", "text/plain",
	                                    "application/json; charset=utf-8", ""};
	const char *method = methods[data[0] % 5];
	const char *ctype = types[data[1] % 4];
	const char *nl = memchr(data + 2, '\n', size - 2);
	size_t plen = nl ? (size_t)(nl - (const char *)data - 2) : size - 2;
	char *path = strndup((const char *)data + 2, plen);
	size_t blen = nl ? size - 2 - plen - 1 : 0;
	char *body = malloc(blen + 1);
	memcpy(body, nl ? nl + 1 : "", blen);
	body[blen] = 0;
	const char *headers[] = {"Content-Type", ctype, NULL};
	struct tf_web_req rq = {.method = method, .path = path, .body = body, .body_len = blen,
	                        .headers = headers};
	struct tf_web_resp rs = {0};
	tf_web_serve(srv, &rq, &rs);
	if (rs.status < 200 || rs.status > 599)
		abort();
	if (rs.stream) { /* take a little of a stream, then drop it */
		char buf[4096];
		for (int i = 0; i < 3 && rs.stream(rs.stream_ctx, buf, sizeof(buf)) > 0; i++)
			;
	}
	/* Model serving speaks its clients' formats (docs/serving.md): TensorFlow Serving's REST
	 * API under /v1/models/ and the Open Inference Protocol under /v2/ answer errors as
	 * {"error": "..."} in application/json; every other answer is a problem document. */
	int serving = !strncmp(path, "/v1/", 4) || !strncmp(path, "/v2/", 4);
	if (rs.status >= 300) {
		json_t *j = rs.body ? json_loadb(rs.body, rs.len, 0, NULL) : NULL;
		int problem = rs.type && !strcmp(rs.type, "application/problem+json") &&
		              json_integer_value(json_object_get(j, "status")) == rs.status;
		int ok = problem || (serving && rs.type && !strcmp(rs.type, "application/json") &&
		                     json_is_string(json_object_get(j, "error")));
		json_decref(j);
		if (!ok) {
			fprintf(stderr, "fuzz_api: %s %s answered %d %s: %.*s\n", method, path,
			        rs.status, rs.type ? rs.type : "(no type)", (int)rs.len,
			        rs.body ? rs.body : "");
			abort();
		}
	}
	tf_web_resp_release(&rs);
	free(path);
	free(body);
	return 0;
}
