import CPostgres
import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// Who may do what on the office's server (docs/office.md, "Roles: who
/// may write what"). Three group roles, made by `office init`
/// (`initialize`):
/// - `beaconbench_owner` owns every table, view and function: migrations
///   and the office's repairs run as it; row-level security does not bind
///   it (it is the tables' owner).
/// - `beaconbench_office` reads everything and writes nothing.
/// - `beaconbench_bench`: each bench's login role is a member, and is
///   mapped to its bench id in `bench_roles` (kept by the owner). A bench
///   role reads everything; it inserts and updates only rows carrying its
///   own bench id (row-level security on every table with one), appends
///   only to its own ledger, and reaches shared state (identity claims,
///   minor blocks, convergence of assignments) only through SECURITY
///   DEFINER functions that act for its own bench and no other.
///
/// Version 12 of the server's schema (`schema`) holds the mapping table,
/// the policies and the functions; it needs no role to exist, so a bench
/// migrating an old server applies it too. The roles and grants are
/// `initialize`'s.
public enum ServerRoles {
    public static let owner = "beaconbench_owner"
    public static let office = "beaconbench_office"
    public static let bench = "beaconbench_bench"

    /// Tables whose rows carry a bench id (`bench_id`): each bench writes
    /// only its own.
    static let benchTables = [
        "benches", "devices", "runs", "outcomes", "readings", "trips", "events", "incidents", "identities",
        "identity_claims", "minor_blocks", "bench_ledger_heads", "bench_ledgers", "bench_ledger_blocks",
        "bench_checkpoints", "ledger_rewrites",
    ]

    /// What a bench role may write directly (row-level security then
    /// limits it to its own rows): the rest it only reads.
    static let benchWrites: [(table: String, rights: String)] = [
        ("benches", "INSERT, UPDATE"), ("devices", "INSERT, UPDATE"), ("runs", "INSERT, UPDATE"),
        ("outcomes", "INSERT, UPDATE"), ("readings", "INSERT, UPDATE"), ("trips", "INSERT, UPDATE"),
        ("events", "INSERT, UPDATE"), ("incidents", "INSERT, UPDATE"), ("identities", "INSERT, UPDATE"),
        ("minor_blocks", "UPDATE"), ("bench_ledgers", "INSERT"), ("bench_ledger_blocks", "INSERT"),
        ("bench_checkpoints", "INSERT"), ("ledger_rewrites", "INSERT"), ("fleet_assignments", "INSERT, UPDATE"),
        ("assignment_conflicts", "INSERT"),
    ]

    /// Every table and view of the schema (what `initialize` gives to the owner).
    static let tables =
        benchTables + [
            "beaconbench_schema", "beaconbench_afterwork", "fleet_assignments", "assignment_conflicts", "bench_roles",
        ]
    static let views = ["fleet_devices", "bench_ledger_entries"]

    /// The functions a bench calls into shared state with (EXECUTE granted
    /// to bench roles only).
    static let benchFunctions = [
        "beaconbench_claim_identity(bigint, bigint, text, text, text, bigint, boolean)",
        "beaconbench_register_claims(text, text[])",
        "beaconbench_report_converged(text, text[], text[], text[], text[], bigint[])",
    ]

    /// Version 12: the mapping of login roles to benches, the policies,
    /// and the SECURITY DEFINER functions. Every statement may run again.
    static var schema: String {
        var sql = """
            CREATE TABLE IF NOT EXISTS bench_roles (
                role_name TEXT PRIMARY KEY,
                bench_id  TEXT NOT NULL UNIQUE,
                made_at   TEXT NOT NULL
            );

            -- The bench the current role syncs as; NULL for any role not
            -- mapped (the office, a stranger): then no policy lets it write.
            CREATE OR REPLACE FUNCTION beaconbench_role_bench() RETURNS text LANGUAGE sql STABLE AS $fn$
                SELECT bench_id FROM bench_roles WHERE role_name = current_user
            $fn$;

            -- Called first by every SECURITY DEFINER function a bench may
            -- call: a bench role (the session's login role, as the definer's
            -- rights hide the caller's) acts for its own bench only, and a
            -- member of beaconbench_bench that is not mapped for none.
            CREATE OR REPLACE FUNCTION beaconbench_acting_for(p_bench text) RETURNS void LANGUAGE plpgsql STABLE AS $fn$
            DECLARE
                v_mapped text;
            BEGIN
                SELECT bench_id INTO v_mapped FROM bench_roles WHERE role_name = session_user;
                IF FOUND THEN
                    IF v_mapped IS DISTINCT FROM p_bench THEN
                        RAISE EXCEPTION 'permission denied: role % syncs bench %, not bench %', session_user, v_mapped,
                            p_bench USING ERRCODE = 'insufficient_privilege';
                    END IF;
                    RETURN;
                END IF;
                IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'beaconbench_bench')
                    AND pg_has_role(session_user, 'beaconbench_bench', 'MEMBER') THEN
                    RAISE EXCEPTION 'permission denied: role % is a bench role mapped to no bench', session_user
                        USING ERRCODE = 'insufficient_privilege';
                END IF;
            END
            $fn$;

            -- A bench's identities claimed fleet-wide (InventorySync.registerClaims).
            CREATE OR REPLACE FUNCTION beaconbench_register_claims(p_bench text, p_devices text[]) RETURNS void
            LANGUAGE plpgsql SECURITY DEFINER AS $fn$
            BEGIN
                PERFORM beaconbench_acting_for(p_bench);
                -- Two benches moving claims to one identity at once: the
                -- second meets the first's row (unique_violation); run
                -- again, the statement sees it committed and leaves it out.
                FOR v_attempt IN 1..6 LOOP
                    BEGIN
                        UPDATE identity_claims c SET major = i.major, minor = i.minor, bench_id = i.bench_id,
                            claimed_at = i.reserved_at
                        FROM identities i
                        WHERE i.bench_id = p_bench AND c.address = i.device AND i.reserved_at > c.claimed_at
                            AND (p_devices IS NULL OR i.device = ANY(p_devices))
                            AND i.major BETWEEN 0 AND 65535 AND i.minor BETWEEN 0 AND 65535
                            AND (c.major, c.minor) <> (i.major, i.minor)
                            AND NOT EXISTS (
                                SELECT 1 FROM identity_claims o
                                WHERE o.major = i.major AND o.minor = i.minor AND o.address <> i.device);
                        EXIT;
                    EXCEPTION WHEN unique_violation THEN
                        IF v_attempt = 6 THEN
                            RAISE;
                        END IF;
                    END;
                END LOOP;
                INSERT INTO identity_claims (major, minor, address, bench_id, claimed_at)
                SELECT major, minor, device, bench_id, reserved_at FROM identities WHERE bench_id = p_bench
                    AND (p_devices IS NULL OR device = ANY(p_devices))
                    AND major BETWEEN 0 AND 65535 AND minor BETWEEN 0 AND 65535
                ON CONFLICT DO NOTHING;
            END
            $fn$;

            -- A bench's convergences of assignments (AssignmentExchange.reportConverged):
            -- only the convergence columns, only as this bench.
            CREATE OR REPLACE FUNCTION beaconbench_report_converged(
                p_bench text, p_addresses text[], p_assigned_at text[], p_assigned_by text[], p_at text[],
                p_run bigint[])
            RETURNS SETOF text LANGUAGE plpgsql SECURITY DEFINER AS $fn$
            BEGIN
                PERFORM beaconbench_acting_for(p_bench);
                PERFORM address FROM fleet_assignments WHERE address = ANY(p_addresses) ORDER BY address FOR UPDATE;
                RETURN QUERY
                UPDATE fleet_assignments f
                SET converged_at = c.at, converged_bench = p_bench, converged_run = c.run
                FROM unnest(p_addresses, p_assigned_at, p_assigned_by, p_at, p_run)
                    AS c(address, assigned_at, assigned_by, at, run)
                WHERE f.address = c.address AND f.assigned_at = c.assigned_at AND f.assigned_by = c.assigned_by
                  AND (f.converged_at IS NULL OR f.converged_at > c.at)
                RETURNING f.address;
            END
            $fn$;

            """
        sql += claimIdentityActingForItsBench + "\n"
        for table in benchTables {
            sql += """
                ALTER TABLE \(table) ENABLE ROW LEVEL SECURITY;
                DROP POLICY IF EXISTS beaconbench_read ON \(table);
                CREATE POLICY beaconbench_read ON \(table) FOR SELECT USING (true);
                DROP POLICY IF EXISTS beaconbench_own_insert ON \(table);
                CREATE POLICY beaconbench_own_insert ON \(table) FOR INSERT
                    WITH CHECK (bench_id = beaconbench_role_bench());
                DROP POLICY IF EXISTS beaconbench_own_update ON \(table);
                CREATE POLICY beaconbench_own_update ON \(table) FOR UPDATE
                    USING (bench_id = beaconbench_role_bench()) WITH CHECK (bench_id = beaconbench_role_bench());
                DROP POLICY IF EXISTS beaconbench_own_delete ON \(table);
                CREATE POLICY beaconbench_own_delete ON \(table) FOR DELETE USING (bench_id = beaconbench_role_bench());

                """
        }
        // Assignments are fleet-wide (the later one wins, whoever wrote
        // it): a bench writes any device's, but only as itself.
        sql += """
            ALTER TABLE fleet_assignments ENABLE ROW LEVEL SECURITY;
            DROP POLICY IF EXISTS beaconbench_read ON fleet_assignments;
            CREATE POLICY beaconbench_read ON fleet_assignments FOR SELECT USING (true);
            DROP POLICY IF EXISTS beaconbench_own_insert ON fleet_assignments;
            CREATE POLICY beaconbench_own_insert ON fleet_assignments FOR INSERT
                WITH CHECK (origin = beaconbench_role_bench());
            DROP POLICY IF EXISTS beaconbench_own_update ON fleet_assignments;
            CREATE POLICY beaconbench_own_update ON fleet_assignments FOR UPDATE
                USING (true) WITH CHECK (origin = beaconbench_role_bench());
            ALTER TABLE assignment_conflicts ENABLE ROW LEVEL SECURITY;
            DROP POLICY IF EXISTS beaconbench_read ON assignment_conflicts;
            CREATE POLICY beaconbench_read ON assignment_conflicts FOR SELECT USING (true);
            DROP POLICY IF EXISTS beaconbench_own_insert ON assignment_conflicts;
            CREATE POLICY beaconbench_own_insert ON assignment_conflicts FOR INSERT
                WITH CHECK (noticed_by = beaconbench_role_bench());

            -- The functions that write the heads of benches' ledgers (which
            -- no bench may write) run as the owner; every function's names
            -- are looked up in this schema only (never pg_temp first, where
            -- any session may make a table of the same name).
            ALTER FUNCTION beaconbench_ledger_append() SECURITY DEFINER;
            ALTER FUNCTION beaconbench_ledger_append_blocks() SECURITY DEFINER;
            DO $do$
            DECLARE
                f regprocedure;
            BEGIN
                FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
                    WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'beaconbench\\_%'
                LOOP
                    EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
                END LOOP;
            END
            $do$;
            """
        return sql
    }

    /// Version 9's claim function, acting for its caller's bench only and
    /// with the owner's rights (it leases blocks and claims minors across
    /// benches' rows, under the rules it keeps).
    static var claimIdentityActingForItsBench: String {
        let source = ServerIdentities.blocksSchema
        let parts = source.components(separatedBy: "CREATE OR REPLACE FUNCTION beaconbench_claim_identity(")
        guard parts.count == 2 else { preconditionFailure("ServerIdentities.blocksSchema lost its claim function") }
        let function = "CREATE OR REPLACE FUNCTION beaconbench_claim_identity(" + parts[1]
        let plain = "LANGUAGE plpgsql AS $fn$"
        let body = "BEGIN\n    FOR v_attempt IN 1..200 LOOP"
        guard function.contains(plain), function.contains(body) else {
            preconditionFailure("ServerIdentities.blocksSchema's claim function changed shape")
        }
        return
            function
            .replacingEvery(plain, with: "LANGUAGE plpgsql SECURITY DEFINER AS $fn$")
            .replacingEvery(
                body, with: "BEGIN\n    PERFORM beaconbench_acting_for(p_bench);\n    FOR v_attempt IN 1..200 LOOP")
    }

    /// What `initialize` did.
    public struct Initialized: Sendable {
        public var rolesMade: [String]
        public var schemaVersion: Int
        public var schema: String
    }

    /// `office init`: makes the three group roles (when missing), gives
    /// the owner every table, view and function of the schema, brings the
    /// schema to this program's version as the owner, and grants each
    /// role its rights. Needs a role that may create roles and own the
    /// schema's objects (a superuser, or the database's owner with
    /// CREATEROLE). Runs again harmlessly (after an upgrade: the new
    /// objects' grants).
    public static func initialize(url: String) throws(SyncError) -> Initialized {
        let server = try PostgresConnection(url)
        try server.exec("SET client_min_messages TO warning")
        var made: [String] = []
        for role in [owner, office, bench] {
            let exists = try server.exec("SELECT 1 FROM pg_roles WHERE rolname = $1", [role])
            if exists.isEmpty {
                try server.exec("CREATE ROLE \(role) NOLOGIN")
                made.append(role)
            }
        }
        let schema = try server.exec("SELECT current_schema()").first?.first ?? nil
        guard let schema else { throw SyncError("the server has no current schema (search_path is empty)") }
        let quotedSchema = quoted(schema)
        // The owner may create in the schema; nobody else may (a bench
        // that could would make functions and tables of its own there).
        try server.exec("GRANT USAGE, CREATE ON SCHEMA \(quotedSchema) TO \(owner)")
        try server.exec("REVOKE CREATE ON SCHEMA \(quotedSchema) FROM PUBLIC")
        try server.exec("GRANT USAGE ON SCHEMA \(quotedSchema) TO \(office), \(bench)")
        // What exists already (made by whoever synced first) goes to the owner.
        try server.exec(
            """
            DO $do$
            DECLARE
                r record;
            BEGIN
                FOR r IN SELECT c.relname, c.relkind FROM pg_class c
                    WHERE c.relnamespace = current_schema()::regnamespace
                        AND c.relname = ANY(\(arrayLiteral(tables + views)))
                        AND c.relkind IN ('r', 'p', 'v')
                LOOP
                    EXECUTE format('ALTER %s %I OWNER TO \(owner)',
                        CASE WHEN r.relkind = 'v' THEN 'VIEW' ELSE 'TABLE' END, r.relname);
                END LOOP;
                FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p
                    WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'beaconbench\\_%'
                LOOP
                    EXECUTE format('ALTER FUNCTION %s OWNER TO \(owner)', r.f);
                END LOOP;
            END
            $do$
            """)
        // The schema as the owner: what it makes, it owns.
        try server.exec("SET ROLE \(owner)")
        try InventorySync.prepareSchema(server, creating: true)
        let version = try InventorySync.schemaVersion(server)
        let names = tables.joined(separator: ", ")
        try server.exec("REVOKE ALL ON \(names), \(views.joined(separator: ", ")) FROM PUBLIC")
        try server.exec("GRANT SELECT ON \(names), \(views.joined(separator: ", ")) TO \(office), \(bench)")
        for (table, rights) in benchWrites { try server.exec("GRANT \(rights) ON \(table) TO \(bench)") }
        for function in benchFunctions {
            try server.exec("REVOKE ALL ON FUNCTION \(function) FROM PUBLIC")
            try server.exec("GRANT EXECUTE ON FUNCTION \(function) TO \(bench)")
        }
        // A later migration's tables are readable at once (init, run
        // again after an upgrade, grants their writes).
        try server.exec(
            "ALTER DEFAULT PRIVILEGES IN SCHEMA \(quotedSchema) GRANT SELECT ON TABLES TO \(office), \(bench)")
        try server.exec("RESET ROLE")
        return Initialized(rolesMade: made, schemaVersion: version, schema: schema)
    }

    /// A bench's credentials (`office bench-role`).
    public struct BenchCredentials: Sendable {
        public var role: String
        public var bench: String
        /// Generated here, sent to the server only as its SCRAM verifier
        /// (computed by libpq on this machine): the server, its logs and
        /// its catalogs never hold it in clear.
        public var password: String
        /// The bench's connection string, without the password.
        public var conninfo: String
        /// The `~/.pgpass` line that holds the password for it.
        public var pgpassLine: String
        public var replaced: Bool
    }

    /// Makes (or, with `replace`, gives a new password to) the login role
    /// of bench `benchID`, a member of `beaconbench_bench`, mapped to the
    /// bench in `bench_roles`. `role` defaults to `bench_` and the bench
    /// id's letters and digits. The role name and bench id are checked:
    /// 1–63 characters of `[A-Za-z0-9_.-]`.
    public static func makeBenchRole(
        url: String, benchID: String, role given: String? = nil, replace: Bool = false
    ) throws(SyncError) -> BenchCredentials {
        guard isPlainName(benchID) else {
            throw SyncError("the bench id must be 1–63 characters of letters, digits, '_', '.' or '-'")
        }
        let role =
            given
            ?? "bench_"
            + String(benchID.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "_" }.prefix(57))
        guard isPlainName(role) else {
            throw SyncError("the role name must be 1–63 characters of letters, digits, '_', '.' or '-'")
        }
        let server = try PostgresConnection(url)
        try server.exec("SET client_min_messages TO warning")
        let initialized = try server.exec("SELECT 1 FROM pg_roles WHERE rolname = $1", [bench])
        guard !initialized.isEmpty,
            (try server.exec("SELECT to_regclass('bench_roles')::text").first?.first ?? nil) != nil
        else {
            throw SyncError("the server has no beaconbench roles yet: run 'office init' on it first")
        }
        let password = generatedPassword()
        guard let verifier = server.encryptedPassword(password, user: role) else {
            throw SyncError("libpq could not compute the password's SCRAM verifier: \(server.lastError)")
        }
        let exists = !(try server.exec("SELECT 1 FROM pg_roles WHERE rolname = $1", [role])).isEmpty
        let mapped = try server.exec("SELECT role_name FROM bench_roles WHERE bench_id = $1", [benchID]).first?.first
        if let mapped, let name = mapped, name != role {
            throw SyncError(
                "bench \(benchID) already syncs as role \(name): give --role \(name) (with --replace for a new password)"
            )
        }
        if exists, !replace {
            throw SyncError(
                "role \(role) exists already: --replace gives it a new password (the old one stops working)")
        }
        try server.transaction { () throws(SyncError) in
            let statement =
                try server.exec(
                    exists
                        ? "SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)"
                        : "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE \(bench)', $1::text, $2::text)",
                    [role, verifier]
                ).first?.first ?? nil
            guard let statement else { throw SyncError("the server could not quote the role's name") }
            try server.exec(statement)
            if exists { try server.exec("GRANT \(bench) TO \(quoted(role))") }
            try server.exec("SET LOCAL ROLE \(owner)")
            try server.exec(
                """
                INSERT INTO bench_roles (role_name, bench_id, made_at) VALUES ($1, $2, $3)
                ON CONFLICT (role_name) DO UPDATE SET bench_id = excluded.bench_id, made_at = excluded.made_at
                """, [role, benchID, Date().ISO8601Format()])
        }
        let facts = PostgresConnection.facts(url)
        var pairs: [String] = []
        for key in ["host", "hostaddr", "port", "dbname", "sslmode", "sslrootcert"] {
            if let value = facts[key], !value.isEmpty { pairs.append("\(key)=\(conninfoValue(value))") }
        }
        pairs.append("user=\(conninfoValue(role))")
        func pgpassField(_ text: String) -> String {
            text.replacingEvery("\\", with: "\\\\").replacingEvery(":", with: "\\:")
        }
        let host = facts["host"].map { $0.hasPrefix("/") ? "localhost" : $0 } ?? "localhost"
        let pgpass = [host, facts["port"] ?? "5432", facts["dbname"] ?? "*", role, password].map(pgpassField)
            .joined(separator: ":")
        return BenchCredentials(
            role: role, bench: benchID, password: password, conninfo: pairs.joined(separator: " "),
            pgpassLine: pgpass, replaced: exists)
    }

    /// 1–63 characters of letters, digits, `_`, `.` and `-`.
    static func isPlainName(_ text: String) -> Bool {
        (1...63).contains(text.utf8.count)
            && text.utf8.allSatisfy {
                (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
                    || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-")
            }
    }

    /// 32 characters from the kernel's random bytes (letters and digits:
    /// nothing a shell or a connection string would read specially).
    static func generatedPassword() -> String {
        let alphabet = Array("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789")
        var generator = SystemRandomNumberGenerator()
        return String((0..<32).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] })
    }

    /// A name as an SQL identifier, quoted.
    static func quoted(_ name: String) -> String { "\"" + name.replacingEvery("\"", with: "\"\"") + "\"" }

    static func arrayLiteral(_ names: [String]) -> String {
        "ARRAY[" + names.map { "'\($0)'" }.joined(separator: ", ") + "]::text[]"
    }

    /// A value in a `key=value` connection string, quoted when it must be.
    static func conninfoValue(_ text: String) -> String {
        if !text.isEmpty, text.utf8.allSatisfy({ $0 > 0x20 && $0 != UInt8(ascii: "'") && $0 != UInt8(ascii: "\\") }) {
            return text
        }
        return "'" + text.replacingEvery("\\", with: "\\\\").replacingEvery("'", with: "\\'") + "'"
    }
}

extension PostgresConnection {
    /// `password`'s verifier for `user` as the server's
    /// `password_encryption` asks (SCRAM-SHA-256 by default), computed here.
    func encryptedPassword(_ password: String, user: String) -> String? {
        guard let encrypted = PQencryptPasswordConn(handle, password, user, nil) else { return nil }
        defer { PQfreemem(encrypted) }
        return String(cString: encrypted)
    }

    /// A connection string's keywords and values as libpq reads them
    /// (empty when it cannot).
    static func facts(_ conninfo: String) -> [String: String] {
        var facts: [String: String] = [:]
        guard let options = PQconninfoParse(conninfo, nil) else { return facts }
        defer { PQconninfoFree(options) }
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { facts[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        return facts
    }
}
