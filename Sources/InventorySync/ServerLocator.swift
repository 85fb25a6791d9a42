import CPostgres
import FoundationEssentials
import SafeText

/// What `--inventory`, `--server` and `sync --to` name (docs/office.md,
/// "Server locators"): a PostgreSQL server — a `postgresql://` or
/// `postgres://` URL, or a libpq `key=value` connection string — always,
/// never a local file; else a local path. Text that looks like a
/// connection string (a word of the form `keyword=` that libpq knows) but
/// that libpq cannot read, or that holds a password without being a
/// server, is neither: refused. What is shown or kept of a locator is
/// `shown(_:)`: the password never.
public enum ServerLocator {
    public enum Kind: Equatable, Sendable {
        case server
        case path
        /// Neither: the reason, with no password in it.
        case invalid(String)
    }

    /// libpq's connection keywords (those of PostgreSQL 15's libpq).
    static let keywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "channel_binding", "connect_timeout",
        "client_encoding", "options", "application_name", "fallback_application_name", "keepalives",
        "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "replication", "gssencmode",
        "sslmode", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslrootcert", "sslcrl",
        "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname",
        "gsslib", "service", "target_session_attrs", "load_balance_hosts", "require_auth", "sslcertmode",
    ]

    public static func kind(_ text: String) -> Kind {
        if text.hasPrefix("postgresql://") || text.hasPrefix("postgres://") {
            return parses(text) ? .server : .invalid("not a PostgreSQL URL libpq can read: \(shown(text))")
        }
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
        let looksLikeConninfo = words.contains { word in
            guard let equals = word.firstIndex(of: "=") else { return false }
            return keywords.contains(word[..<equals].lowercased().trimmingWhitespace())
        }
        if looksLikeConninfo {
            return parses(text) ? .server : .invalid("not a connection string libpq can read: \(shown(text))")
        }
        if ConnectionPasswords.contains(text) {
            return .invalid("holds a password but names no server: \(shown(text))")
        }
        if text.isEmpty { return .invalid("empty") }
        return .path
    }

    public static func isServer(_ text: String) -> Bool { kind(text) == .server }

    /// `text` as it may be shown or stored: every password replaced by `***`.
    public static func shown(_ text: String) -> String { ConnectionPasswords.redacted(text) }

    static func parses(_ text: String) -> Bool {
        guard beaconbench_libpq_load() == 1 else {
            // Without libpq nothing connects; the shape decides.
            return true
        }
        var error: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(text, &error) else {
            if let error { PQfreemem(error) }
            return false
        }
        PQconninfoFree(options)
        return true
    }
}

extension ServerLocator {
    /// Why a connection to `conninfo` could be read or changed on the way
    /// (nil when it cannot: a local server — a Unix socket, localhost,
    /// 127.0.0.1, ::1 — or `sslmode=verify-full`/`verify-ca`). libpq's
    /// default, `prefer`, falls back to plaintext without a word, and
    /// `require` encrypts without checking who answers.
    public static func transportRisk(_ conninfo: String) -> String? {
        let facts = PostgresConnection.facts(conninfo)
        let environment = ProcessInfo.processInfo.environment
        let hosts =
            (facts["host"] ?? environment["PGHOST"] ?? "").split(separator: ",").map(String.init)
            + (facts["hostaddr"] ?? environment["PGHOSTADDR"] ?? "").split(separator: ",").map(String.init)
        let remote = hosts.filter { host in
            !(host.isEmpty || host.hasPrefix("/") || host.hasPrefix("@") || host == "localhost" || host == "127.0.0.1"
                || host == "::1")
        }
        guard let host = remote.first else { return nil }
        let mode = facts["sslmode"] ?? environment["PGSSLMODE"] ?? "prefer"
        if mode == "verify-full" || mode == "verify-ca" { return nil }
        let risk =
            mode == "require"
            ? "encrypted, but the server's certificate is not checked: a machine in between can pose as the server"
            : "may travel in plaintext: a machine in between can read and change it, the password exchange included"
        return "the connection to \(Visible.text(host, limit: 120)) (sslmode=\(Visible.text(mode, limit: 40))) \(risk);"
            + " add sslmode=verify-full and sslrootcert=… (docs/office.md, \"TLS\")"
    }
}
