/// Shell completion scripts (`beaconbench completion SHELL`), written from
/// the command table: commands, subcommands, options, fixed values, and the
/// profile names of the installed beaconbench (asked at completion time).
enum ShellCompletion {
    /// The global options that take a value (the next word is theirs).
    static let globalsWithValue = [
        "--bus", "--adapter", "--inventory", "--profiles", "--server", "--concurrency", "--sim", "--sim-fleet",
        "--sim-state", "--sim-option",
    ]
    static let globalFlags = [
        "--json", "--no-color", "--verbose", "--dry-run", "--no-adapter-reset", "--require-tls", "--version", "--help",
    ]

    static func script(for shell: String) -> String {
        switch shell {
        case "zsh":
            "#compdef beaconbench\n# zsh completion for beaconbench, through bash's\n"
                + "autoload -U +X bashcompinit && bashcompinit\n" + bash()
        case "fish": fish()
        default: bash()
        }
    }

    /// The words completed after a command: its options, its operands'
    /// fixed values, `@profiles` where a profile name goes.
    static func words(_ spec: CommandSpec) -> [String] {
        var words = spec.allOptions.map(\.name)
        for operand in spec.operands {
            words += operand.kind == .profile ? ["@profiles"] : operand.kind.completionWords
            if operand.kind == .command { words += CommandTable.specs.map(\.family) }
        }
        return Array(Set(words)).sorted()
    }

    static var topLevel: [String] { ["run"] + Array(Set(CommandTable.specs.map(\.family))).sorted() }

    static func bash() -> String {
        var cases = ""
        for spec in CommandTable.specs {
            let words = words(spec)
            let plain = words.filter { $0 != "@profiles" }.joined(separator: " ")
            let profiles = words.contains("@profiles") ? " $(_beaconbench_profiles)" : ""
            cases += "        \"\(spec.name)\") words=\"\(plain)\(profiles)\" ;;\n"
        }
        var families = ""
        for family in Set(CommandTable.specs.filter { $0.name.contains(" ") }.map(\.family)).sorted() {
            let members = CommandTable.family(family)?.map { String($0.spec.name.split(separator: " ")[1]) } ?? []
            families += "        \(family)) subcommands=\"\(members.joined(separator: " "))\" ;;\n"
        }
        return """
            # bash completion for beaconbench (written by `beaconbench completion bash`)
            _beaconbench_profiles() {
                beaconbench profiles list --json 2>/dev/null | sed -n 's/.*"name" *: *"\\([^"]*\\)".*/\\1/p'
            }
            _beaconbench() {
                local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
                local i command="" sub="" words="" subcommands=""
                case "$prev" in
                    --inventory|--sim-fleet|--sim-state) COMPREPLY=($(compgen -f -- "$cur")); return ;;
                    --profiles) COMPREPLY=($(compgen -d -- "$cur")); return ;;
                    --bus) COMPREPLY=($(compgen -W "system session" -- "$cur")); return ;;
                    \(globalsWithValue.joined(separator: "|"))) return ;;
                esac
                for ((i = 1; i < COMP_CWORD; i++)); do
                    case "${COMP_WORDS[i]}" in
                        \(globalsWithValue.joined(separator: "|"))) ((i++)) ;;
                        -*) ;;
                        *) if [[ -z $command ]]; then command=${COMP_WORDS[i]}
                           elif [[ -z $sub ]]; then sub=${COMP_WORDS[i]}; fi ;;
                    esac
                done
                if [[ -z $command ]]; then
                    COMPREPLY=($(compgen -W "\(topLevel.joined(separator: " ")) \((globalsWithValue + globalFlags).joined(separator: " "))" -- "$cur"))
                    return
                fi
                if [[ $command == run ]]; then
                    COMPREPLY=($(compgen -f -X '!*.batch' -- "$cur") $(compgen -d -- "$cur") $(compgen -W "--set --dry-run" -- "$cur"))
                    return
                fi
                case "$command" in
            \(families)    esac
                local extra=""
                if [[ -n $subcommands ]]; then
                    if [[ -z $sub ]]; then extra=$subcommands
                    elif [[ " $subcommands " == *" $sub "* ]]; then command="$command $sub"; fi
                fi
                case "$command" in
            \(cases)    esac
                COMPREPLY=($(compgen -W "$words $extra" -- "$cur"))
            }
            complete -F _beaconbench beaconbench

            """
    }

    static func fish() -> String {
        var lines = [
            "# fish completion for beaconbench (written by `beaconbench completion fish`)",
            "function __beaconbench_profiles",
            "    beaconbench profiles list --json 2>/dev/null | string match -rg '\"name\" *: *\"([^\"]*)\"'",
            "end",
            "complete -c beaconbench -f",
            "complete -c beaconbench -n __fish_use_subcommand -a run -d 'run a batch file'",
        ]
        for name in globalsWithValue + globalFlags {
            lines.append("complete -c beaconbench -l \(name.dropFirst(2))")
        }
        for spec in CommandTable.specs {
            let parts = spec.name.split(separator: " ").map(String.init)
            let summary = quote(spec.summary)
            if parts.count == 1 {
                lines.append("complete -c beaconbench -n __fish_use_subcommand -a \(parts[0]) -d \(summary)")
            } else {
                lines.append(
                    "complete -c beaconbench -n '__fish_seen_subcommand_from \(parts[0]); and not __fish_seen_subcommand_from \(CommandTable.family(parts[0])!.map { String($0.spec.name.split(separator: " ")[1]) }.joined(separator: " "))' -a \(parts[1]) -d \(summary)"
                )
                if spec.isFamilyDefault {
                    lines.append("complete -c beaconbench -n __fish_use_subcommand -a \(parts[0]) -d \(summary)")
                }
            }
            let condition = "'__fish_seen_subcommand_from \(parts.last!)'"
            for option in spec.allOptions {
                var line =
                    "complete -c beaconbench -n \(condition) -l \(option.name.dropFirst(2)) -d \(quote(option.summary))"
                if case .choice(let words)? = option.value { line += " -xa '\(words.joined(separator: " "))'" }
                lines.append(line)
            }
            for word in words(spec) where !word.hasPrefix("--") {
                lines.append(
                    "complete -c beaconbench -n \(condition) -a "
                        + (word == "@profiles" ? "'(__beaconbench_profiles)'" : quote(word)))
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func quote(_ text: String) -> String { "'" + text.replacingEvery("'", with: "\\'") + "'" }
}
