#ifndef BEACONBENCH_CREADLINE_SHIM_H
#define BEACONBENCH_CREADLINE_SHIM_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
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

/* The session keeps the terminal as readline prepares it (no canonical
   mode, no echo) from its first prompt to its end, instead of readline
   putting it back after each line and preparing it again at the next
   prompt: a Ctrl-D typed in between, in canonical mode, is the kernel's
   end-of-file mark, which becomes a NUL byte when the mode changes, and
   was lost. (Typed-ahead text is not echoed by the kernel either, where
   readline would echo it again at the next prompt.) `release` puts the
   terminal back as readline found it. */
static inline void beaconbench_rl_keep_terminal(void) { rl_deprep_term_function = NULL; }

static inline void beaconbench_rl_release_terminal(void) {
    rl_deprep_term_function = rl_deprep_terminal;
    rl_deprep_terminal();
}

static inline void beaconbench_write_all(int descriptor, const char *text, size_t length) {
    while (length > 0) {
        ssize_t written = write(descriptor, text, length);
        if (written < 0) {
            if (errno == EINTR) continue;
            return;
        }
        text += written;
        length -= (size_t)written;
    }
}

/* Prints `text` and a newline to `descriptor` on a line of its own above the
   prompt and the half-typed line, which are then drawn again below it as
   they were (the point where it was). The prompt's rows are cleared first
   (`rl_clear_visible_line`); on a dumb terminal, which cannot clear, the
   text starts on the next line instead. */
static inline void beaconbench_rl_print_above(const char *text, int descriptor, int dumb) {
    FILE *out = rl_outstream ? rl_outstream : stdout;
    if (dumb) {
        fputs("\n", out);
    } else {
        rl_clear_visible_line();
    }
    fflush(out);
    beaconbench_write_all(descriptor, text, strlen(text));
    beaconbench_write_all(descriptor, "\n", 1);
    rl_on_new_line();
    rl_redisplay();
}

/* Prints `text` and a newline to `descriptor` when no prompt is up. */
static inline void beaconbench_print_line(const char *text, int descriptor) {
    beaconbench_write_all(descriptor, text, strlen(text));
    beaconbench_write_all(descriptor, "\n", 1);
}

/* Ctrl-C at the prompt: the typed line is abandoned, a fresh prompt drawn. */
static inline void beaconbench_rl_cancel_line(void) {
    FILE *out = rl_outstream ? rl_outstream : stdout;
    rl_callback_sigcleanup();
    fputs("^C\n", out);
    fflush(out);
    rl_replace_line("", 0);
    rl_point = 0;
    rl_on_new_line();
    rl_redisplay();
}

/* The newest history entry, or NULL. */
static inline const char *beaconbench_last_history_line(void) {
    HIST_ENTRY *entry = history_get(history_base + history_length - 1);
    return entry ? entry->line : NULL;
}
#endif
