/* cmd_serve.c — `tpuflow serve`: a serving host. Answers predictions for one model over
 * TensorFlow Serving's REST API and the Open Inference Protocol (web/serve.h,
 * docs/serving.md), with health and metrics, and nothing of the rest of the API. */
#include "cli/cli.h"

#include "common/common.h"
#include "orchestrator/store.h"
#include "web/serve.h"
#include "web/server.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char serve_usage[] =
    "usage: tpuflow serve --model NAME [--listen ADDR:PORT] [--auth none|tokens]\n"
    "                     [--max-batch N] [--max-body BYTES] [--tls-cert F --tls-key F]\n"
    "Serves predictions of model NAME of the registry: POST /v1/models/NAME:predict (the\n"
    "'production' alias), /versions/V:predict, /labels/ALIAS:predict, GET /v1/models/NAME\n"
    "and /metadata; the Open Inference Protocol under /v2. Runs until SIGINT or SIGTERM.\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:8501)\n"
    "  --auth tokens|none  tokens (default): a bearer token of scope predict (or admin)\n"
    "  --max-batch N       instances per request (default 1024)\n"
    "  --max-body BYTES    request body cap (default 16 MiB)\n"
    "  --rate N            requests per second per token (default: no limit)\n"
    "  --tls-cert F, --tls-key F  serve HTTPS; --insecure-http allows plain HTTP off loopback\n"
    "  --home DIR, --help\n";

int cmd_serve(int argc, char **argv, struct tf_cli *cli)
{
	enum { O_MODEL = 1, O_LISTEN, O_AUTH, O_BATCH, O_BODY, O_RATE, O_CERT, O_KEY, O_INSECURE };
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"model", required_argument, NULL, O_MODEL},
	    {"listen", required_argument, NULL, O_LISTEN},
	    {"auth", required_argument, NULL, O_AUTH},
	    {"max-batch", required_argument, NULL, O_BATCH},
	    {"max-body", required_argument, NULL, O_BODY},
	    {"rate", required_argument, NULL, O_RATE},
	    {"tls-cert", required_argument, NULL, O_CERT},
	    {"tls-key", required_argument, NULL, O_KEY},
	    {"insecure-http", no_argument, NULL, O_INSECURE},
	    {0},
	};
	/* no rate limit unless asked: a serving client's traffic is the point (TF Serving has
	 * none); the daemon keeps its API's default */
	struct tf_web_opts o = {
	    .listen = "127.0.0.1:8501", .serve_only = 1, .max_body = 16u << 20, .rate = -1};
	long long n;
	int c, rc;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(serve_usage, stdout);
			return TF_EXIT_OK;
		case O_MODEL:
			o.serve_model = optarg;
			break;
		case O_LISTEN:
			o.listen = optarg;
			break;
		case O_AUTH:
			if (!strcmp(optarg, "none"))
				o.auth = TF_WEB_AUTH_NONE;
			else if (strcmp(optarg, "tokens"))
				return tf_cli_usage_error("serve", "--auth is tokens or none");
			break;
		case O_BATCH:
			if ((rc = tf_cli_parse_int("serve", "--max-batch", optarg, 1, 1 << 20, &n)))
				return rc;
			o.serve_max_batch = (size_t)n;
			break;
		case O_BODY:
			if ((rc = tf_cli_parse_int("serve", "--max-body", optarg, 1024, 1ll << 30,
			                           &n)))
				return rc;
			o.max_body = (size_t)n;
			break;
		case O_RATE:
			if ((rc = tf_cli_parse_int("serve", "--rate", optarg, 1, 1000000000, &n)))
				return rc;
			o.rate = (double)n;
			break;
		case O_CERT:
			o.tls_cert = optarg;
			break;
		case O_KEY:
			o.tls_key = optarg;
			break;
		case O_INSECURE:
			o.insecure_http = 1;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("serve", "unknown option");
		}
	}
	if (!o.serve_model)
		return tf_cli_usage_error("serve", "--model NAME is required");
	o.home = cli->home;
	/* the signals are waited for below; block them before the server's threads start */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	char err[1024];
	struct tf_web *w = NULL;
	rc = tf_web_start(&o, &w, err, sizeof(err));
	if (!rc) {
		rc = tf_serve_warm(tf_web_serving(w), cli->db, o.serve_model, err, sizeof(err));
		if (rc >= 0) {
			fprintf(stderr,
			        "tpuflow serve: model %s (%d version%s loaded) on port %d\n",
			        o.serve_model, rc, rc == 1 ? "" : "s", tf_web_port(w));
			rc = 0;
		}
	}
	if (rc) {
		fprintf(stderr, "tpuflow serve: %s\n", err);
		tf_web_stop(w);
		return rc == -EADDRINUSE ? TF_EXIT_UNAVAILABLE : TF_EXIT_CONFIG;
	}
	int sig = 0;
	sigwait(&sigs, &sig);
	fprintf(stderr, "tpuflow serve: %s, stopping\n", strsignal(sig));
	tf_web_stop(w);
	return TF_EXIT_OK;
}
