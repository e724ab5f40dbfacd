/* cmd_db.c — placeholder until the module that owns these subcommands lands. */
#include "cli/cli.h"
#include "common/common.h"

int cmd_db(int argc, char **argv, struct tf_cli *cli)
{
	(void)argc;
	(void)cli;
	fprintf(stderr, "tpuflow %s: not built yet\n", argv[0]);
	return TF_EXIT_SOFTWARE;
}

