/* kinds_shell.c — the shell step (an argv run as a child process); not wired in this build
 * yet. */
#include "orchestrator/kinds.h"

const tf_step_kind_fn tf_kind_shell = NULL;
