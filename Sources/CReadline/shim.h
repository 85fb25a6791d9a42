#ifndef BEACONBENCH_CREADLINE_SHIM_H
#define BEACONBENCH_CREADLINE_SHIM_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <readline/readline.h>
#include <readline/history.h>

/* readline keeps its state in global variables, which Swift 6 will not
   touch; these accessors are the console's only way to them, called from
   the one thread that runs readline. */

static inline void beaconbench_rl_setup(const char *name, rl_completion_func_t *complete) {
    rl_readline_name = strdup(name);
    rl_catch_signals = 0;
    rl_catch_sigwinch = 1;
    rl_attempted_completion_function = complete;
    rl_completer_word_break_characters = strdup(" \t");
}

/* Called at the start of a completion: no filename completion after ours;
   `append` is the character put after a single match (0 for none). */
static inline void beaconbench_rl_completion_settings(int append) {
    rl_attempted_completion_over = 1;
    rl_completion_append_character = append;
}

static inline const char *beaconbench_rl_line_buffer(void) { return rl_line_buffer ? rl_line_buffer : ""; }

/* Prints `text` on a line of its own above the prompt and the half-typed
   line, which are then drawn again as they were. */
static inline void beaconbench_rl_print_above(const char *text) {
    int point = rl_point;
    char *saved = rl_copy_text(0, rl_end);
    rl_save_prompt();
    rl_replace_line("", 0);
    rl_redisplay();
    fputs("\r\033[K", rl_outstream ? rl_outstream : stdout);
    fputs(text, rl_outstream ? rl_outstream : stdout);
    fputs("\n", rl_outstream ? rl_outstream : stdout);
    fflush(rl_outstream ? rl_outstream : stdout);
    rl_restore_prompt();
    rl_replace_line(saved, 0);
    free(saved);
    rl_point = point;
    rl_forced_update_display();
}

/* Ctrl-C at the prompt: the typed line is abandoned, a fresh prompt drawn. */
static inline void beaconbench_rl_cancel_line(void) {
    fputs("^C\n", rl_outstream ? rl_outstream : stdout);
    rl_replace_line("", 0);
    rl_point = 0;
    rl_on_new_line();
    rl_forced_update_display();
}

/* The newest history entry, or NULL. */
static inline const char *beaconbench_last_history_line(void) {
    HIST_ENTRY *entry = history_get(history_base + history_length - 1);
    return entry ? entry->line : NULL;
}
#endif
