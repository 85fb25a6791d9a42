#ifndef BEACONBENCH_CREADLINE_SHIM_H
#define BEACONBENCH_CREADLINE_SHIM_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <readline/readline.h>
#include <readline/history.h>

/* readline keeps its state in global variables, which Swift 6 will not
   touch; these accessors are the console's only way to them, called from
   the one thread that runs readline. */

/* The readline linked in ("8.2"), for `beaconbench --version`. */
static inline const char *beaconbench_rl_version(void) { return rl_library_version; }

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

static inline void beaconbench_rl_refresh_size(void);

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
    /* The window may have changed size while readline was not reading
       (its SIGWINCH handler is installed only then): drawn again at the
       size it has now. */
    beaconbench_rl_refresh_size();
    rl_on_new_line();
    rl_redisplay();
}

/* The window's size when readline last learnt it (0: not yet). Used by
   REPL.swift alone, on the readline thread (a static of this header is one
   per object file that uses it). */
static unsigned short beaconbench_known_rows = 0, beaconbench_known_cols = 0;

static inline int beaconbench_window_size(unsigned short *rows, unsigned short *cols) {
    struct winsize size;
    if (ioctl(STDIN_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col == 0) return 0;
    *rows = size.ws_row;
    *cols = size.ws_col;
    return 1;
}

/* Before a prompt: the window's size as it is now. */
static inline void beaconbench_rl_refresh_size(void) {
    /* (Before the first prompt readline has no input stream yet, and
       learns the size as it starts.) */
    if (rl_instream) rl_reset_screen_size();
    beaconbench_window_size(&beaconbench_known_rows, &beaconbench_known_cols);
}

/* Before readline reads a key: readline's SIGWINCH handler is installed
   only while it reads, so a window resized while it waited went unnoticed;
   when the size changed, readline learns it and draws the line again
   (`rl_resize_terminal`, what its handler does). */
static inline void beaconbench_rl_follow_size(void) {
    unsigned short rows, cols;
    if (!beaconbench_window_size(&rows, &cols)) return;
    if (rows == beaconbench_known_rows && cols == beaconbench_known_cols) return;
    beaconbench_known_rows = rows;
    beaconbench_known_cols = cols;
    rl_resize_terminal();
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
