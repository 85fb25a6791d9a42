import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// `help` and the man page, both from the command table.
enum Manual {
    /// `help` alone: one line per command; `help COMMAND`: the command's
    /// synopsis, options and example (every member of a family).
    static func help(_ topic: String?) -> [String] {
        if let topic {
            let specs =
                (CommandTable.named(topic).map { [$0.spec] } ?? [])
                + (CommandTable.family(topic)?.map { $0.spec } ?? [])
            return specs.flatMap(detail)
        }
        let specs = CommandTable.specs
        let width = min(44, specs.map(\.synopsis.count).max() ?? 0)
        var lines: [String] = []
        for spec in specs {
            if spec.synopsis.count > width {
                lines += [spec.synopsis, String(repeating: " ", count: width + 2) + spec.summary]
            } else {
                lines.append(spec.synopsis.padded(to: width + 2) + spec.summary)
            }
        }
        lines += [
            "",
            "Device commands act on the selection, or on addresses or MAC endings written after them.",
            "Options go anywhere on the line; '--' ends them. Every command takes --json; those that",
            "write to beacons take --dry-run. 'help COMMAND' shows one command with an example.",
        ]
        return lines
    }

    static func detail(_ spec: CommandSpec) -> [String] {
        var lines = ["usage:   \(spec.synopsis)", "         \(spec.summary)"]
        if let detail = spec.detail { lines.append("         \(detail)") }
        let options = spec.allOptions
        if !options.isEmpty {
            let width = options.map { optionText($0).count }.max() ?? 0
            lines.append("options:")
            for option in options {
                lines.append(
                    "  " + optionText(option).padded(to: width + 2) + option.summary
                )
            }
        }
        if spec.actsOnDevices {
            lines.append("devices: the selection, or addresses and MAC endings written at the end of the line")
        }
        lines.append("example: \(spec.example)")
        return lines
    }

    static func optionText(_ option: OptionSpec) -> String {
        option.value == nil ? option.name : "\(option.name) \(option.placeholder)"
    }

    /// The man page (roff), `beaconbench help --man`.
    static func page(version: String) -> String {
        var roff = """
            .TH BEACONBENCH 1 "" "beaconbench \(version)" "User Commands"
            .SH NAME
            beaconbench \\- provision and audit SBeacon vehicle beacons over BlueZ
            .SH SYNOPSIS
            .B beaconbench
            [\\fIOPTIONS\\fR]
            .br
            .B beaconbench
            [\\fIOPTIONS\\fR] \\fBrun\\fR \\fIFILE\\fR [\\fB\\-\\-set\\fR \\fINAME=VALUE\\fR]... [\\fB\\-\\-dry\\-run\\fR]
            .br
            .B beaconbench
            [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR...]
            .SH DESCRIPTION
            beaconbench finds SBeacon beacons, checks battery and firmware, syncs their clocks, calibrates them,
            writes driving-behaviour thresholds from named profiles, assigns identities and reads back what it
            wrote. Without a command it opens a REPL (with Tab completion); \\fBrun\\fR runs a batch file of the
            same commands, checked whole before anything is touched; a command on the command line runs once.
            Every step's outcome is kept in an SQLite inventory.
            .PP
            Options, the command's own included, may be written anywhere on the line; \\fB\\-\\-\\fR ends them.
            .SH OPTIONS
            .nf

            """
        let usage = Invocation.usage.split(separator: "\n", omittingEmptySubsequences: false)
        if let start = usage.firstIndex(where: { $0.hasPrefix("options") }),
            let end = usage[start...].firstIndex(where: { $0.hasPrefix("exit status") })
        {
            for line in usage[(start + 1)..<end] { roff += escape(String(line)) + "\n" }
        }
        roff += ".fi\n.SH COMMANDS\n"
        for spec in CommandTable.specs {
            roff += ".TP\n.B \(escape(spec.synopsis))\n\(escape(spec.summary)).\n"
            if let detail = spec.detail { roff += escape(detail) + "\n" }
            for option in spec.options {
                roff += ".br\n\\fB\(escape(optionText(option)))\\fR: \(escape(option.summary))\n"
            }
            roff += ".br\nExample: \\fB\(escape(spec.example))\\fR\n"
        }
        roff += """
            .SH EXIT STATUS
            0 all went well; 1 bad usage or input (nothing was touched); 2 some devices failed, an audit
            found problems, or values read back from the inventory or the server failed their checks; 3 the
            bus, BlueZ, the adapter or the inventory is unusable; 130 interrupted (Ctrl\\-C);
            143 stopped by SIGTERM (sync says what it sent).
            .SH FILES
            .TP
            .I $XDG_DATA_HOME/beaconbench/inventory.sqlite
            The inventory (0600).
            .TP
            .I $XDG_CONFIG_HOME/beaconbench/profiles
            The user's profiles; the shipped ones are in \\fIPREFIX/share/beaconbench/profiles\\fR.
            .TP
            .I PREFIX/share/beaconbench/batches
            The shipped batches.
            .SH SEE ALSO
            .BR bluetoothctl (1),
            .BR sqlite3 (1).
            The documentation in \\fIPREFIX/share/doc/beaconbench\\fR: the batch language, profiles, the inventory
            schema, the JSON output.

            """
        return roff
    }

    /// Text made safe for roff: backslashes, hyphens, characters beyond
    /// ASCII (`\[u2026]`), and leading dots or quotes.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": escaped += "\\e"
            case "-": escaped += "\\-"
            case _ where scalar.isASCII: escaped.unicodeScalars.append(scalar)
            default: escaped += "\\[u" + CFormat.string("%04X", scalar.value) + "]"
            }
        }
        if escaped.hasPrefix(".") || escaped.hasPrefix("'") { escaped = "\\&" + escaped }
        return escaped
    }
}
