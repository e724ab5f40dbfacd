/* cmd_daemon.c — `tpuflow daemon`: its command line; the process itself is web/daemon.c. */
#include "cli/cli.h"
#include "common/common.h"
#include "orchestrator/pipeline.h"
#include "web/daemon.h"
#include "web/server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void daemon_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: tpuflow daemon [--home DIR] [--listen HOST:PORT] [--grace DURATION]\n"
	    "                      [--auth tokens|none] [--tls-cert PEM --tls-key PEM]\n"
	    "                      [--insecure-http] [--max-conns-per-ip N]\n\n"
	    "Drives every run submitted on the state home (by 'tpuflow run', the HTTP API or a\n"
	    "schedule) and serves the HTTP API, in the foreground. Logs go to stderr as text,\n"
	    "or JSON lines with TPUFLOW_LOG_FORMAT=json (TPUFLOW_LOG=info shows each run).\n\n"
	    "  --listen HOST:PORT  HTTP address (default 127.0.0.1:8470; port 0: any free one)\n"
	    "  --grace DURATION    on SIGTERM/SIGINT, how long running steps get to stop (train\n"
	    "                      steps write a checkpoint) before the daemon exits (default "
	    "30s)\n"
	    "  --auth tokens|none  tokens (default): every API route but health needs a bearer\n"
	    "                      token; none: serve it without (--no-auth says the same)\n"
	    "  --tls-cert PEM, --tls-key PEM\n"
	    "                      serve HTTPS with this certificate (chain) and key\n"
	    "  --insecure-http     allow plain HTTP on an address that is not loopback\n"
	    "                      (something in front of the daemon terminates TLS)\n"
	    "  --max-conns-per-ip N  connections the API takes from one address, 1 to %d\n"
	    "                      (default %d; behind a proxy all clients share one)\n\n"
	    "SIGTERM/SIGINT: stop taking runs, drain, exit 0; the next daemon continues the\n"
	    "runs. SIGHUP: re-read HOME/daemon.conf (max_runs=N, workers=N, log=LEVEL).\n"
	    "Another daemon on the same home: exit 75. See docs/daemon.md.\n",
	    TF_WEB_CONNS, TF_WEB_CONNS_PER_IP);
}

int cmd_daemon(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		OPT_LISTEN = 1,
		OPT_GRACE,
		OPT_NO_AUTH,
		OPT_AUTH,
		OPT_CERT,
		OPT_KEY,
		OPT_INSECURE,
		OPT_CONNS_PER_IP
	};
	static const struct option opts[] = {TF_CLI_COMMON_OPTIONS,
	                                     {"listen", required_argument, NULL, OPT_LISTEN},
	                                     {"grace", required_argument, NULL, OPT_GRACE},
	                                     {"no-auth", no_argument, NULL, OPT_NO_AUTH},
	                                     {"auth", required_argument, NULL, OPT_AUTH},
	                                     {"tls-cert", required_argument, NULL, OPT_CERT},
	                                     {"tls-key", required_argument, NULL, OPT_KEY},
	                                     {"insecure-http", no_argument, NULL, OPT_INSECURE},
	                                     {"max-conns-per-ip", required_argument, NULL,
	                                      OPT_CONNS_PER_IP},
	                                     {0, 0, 0, 0}};
	struct tf_daemon_opts o = {.listen = "127.0.0.1:8470", .grace = 30};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			daemon_usage(stdout);
			return TF_EXIT_OK;
		case OPT_LISTEN:
			if (!strchr(optarg, ':'))
				return tf_cli_usage_error(
				    "daemon", "--listen wants HOST:PORT, not '%s'", optarg);
			o.listen = optarg;
			break;
		case OPT_GRACE:
			if (tf_duration_parse(optarg, &o.grace) || o.grace <= 0)
				return tf_cli_usage_error(
				    "daemon",
				    "--grace wants a duration such as 30s or 2m, not '%s'", optarg);
			break;
		case OPT_NO_AUTH:
			o.auth_none = 1;
			break;
		case OPT_AUTH: /* as `tpuflow serve --auth` */
			if (strcmp(optarg, "none") && strcmp(optarg, "tokens"))
				return tf_cli_usage_error("daemon", "--auth is tokens or none, not '%s'",
				                          optarg);
			o.auth_none = !strcmp(optarg, "none");
			break;
		case OPT_CERT:
			o.tls_cert = optarg;
			break;
		case OPT_KEY:
			o.tls_key = optarg;
			break;
		case OPT_INSECURE:
			o.insecure_http = 1;
			break;
		case OPT_CONNS_PER_IP: {
			char *end = NULL;
			errno = 0;
			long n = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || n < 1 || n > TF_WEB_CONNS)
				return tf_cli_usage_error(
				    "daemon",
				    "--max-conns-per-ip wants a whole number from 1 to %d (the API's "
				    "connections in all), not '%s'",
				    TF_WEB_CONNS, optarg);
			o.max_conns_per_ip = (unsigned)n;
			break;
		}
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("daemon", "unknown option");
		}
	}
	if (optind != argc)
		return tf_cli_usage_error("daemon", "unexpected argument '%s'", argv[optind]);
	o.home = cli->home;
	char err[1024] = "";
	int rc = tf_daemon_run(&o, err, sizeof(err));
	if (rc == 0)
		return TF_EXIT_OK;
	fprintf(stderr, "tpuflow daemon: %s\n", err);
	if (rc == -EBUSY)
		return TF_EXIT_TEMPFAIL;
	/* a listen address or TLS files it cannot use: the configuration (78) */
	int config = rc == -EPROTO || rc == -EPERM || rc == -EINVAL || rc == -ENOTSUP;
	return config ? TF_EXIT_CONFIG : TF_EXIT_UNAVAILABLE;
}
