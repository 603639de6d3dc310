/* The subcommands of the conch executable.  Each takes the arguments from
   its own name on (argv[0] is the subcommand) and returns the exit status. */
#ifndef CONCH_COMMANDS_H
#define CONCH_COMMANDS_H

/* serve_main.c: the local envd-compatible process server. */
int conch_cmd_serve(int argc, char **argv);

#endif
