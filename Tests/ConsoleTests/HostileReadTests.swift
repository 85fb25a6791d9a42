import Foundation
import TestSupport
import Testing

/// Every file the tool reads (issue 51), given as a FIFO, /dev/zero (by a
/// link and directly), a directory, a missing file and a file one byte over
/// its limit (sparse: it costs nothing): the built binary refuses each at
/// once, naming the file and why, with the reader's exit status. A FIFO
/// would make a reader that blocks wait for ever and /dev/zero would make
/// one that reads before it checks fill memory: every run has a time
/// limit, and a run killed at it fails naming the reader and the kind.
@Suite("hostile files to read: FIFO, /dev/zero, directory, missing, oversize", .timeLimit(.minutes(10)))
struct HostileReadTests {
    enum Kind: String, CaseIterable, Sendable {
        case fifo, zeroLink, zero, directory, missing, oversize
    }

    /// What the run is refused with, after the file's name.
    static func why(_ kind: Kind, limit: String) -> String {
        switch kind {
        case .fifo: "is a FIFO, not a regular file"
        case .zeroLink, .zero: "is a character device, not a regular file"
        case .directory: "is a directory, not a regular file"
        case .missing: "does not exist"
        case .oversize: "is larger than \(limit)"
        }
    }

    /// Makes a file of `kind` at `path` (the file to name: /dev/zero for
    /// `.zero`); `limit` is the reader's.
    static func make(_ kind: Kind, at path: String, limit: Int) throws -> String {
        switch kind {
        case .fifo:
            try #require(mkfifo(path, 0o600) == 0, "mkfifo \(path)")
        case .zeroLink:
            try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: "/dev/zero")
        case .zero:
            return "/dev/zero"
        case .directory:
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        case .missing:
            break
        case .oversize:
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            try #require(descriptor >= 0)
            defer { close(descriptor) }
            try #require(ftruncate(descriptor, off_t(limit + 1)) == 0)
        }
        return path
    }

    /// The seconds each run may take: a reader that blocked on the FIFO
    /// (or read /dev/zero whole) is killed at this.
    static let timeout: TimeInterval = 30

    struct Place {
        let directory: String
        let ledger: LedgerCommandTests.Bench

        func beaconbench(_ arguments: [String], environment: [String: String]? = nil) async throws -> ToolOutput {
            var environment = environment ?? ProcessInfo.processInfo.environment
            environment["BEACONBENCH_LEDGER_SIGNER"] = "ana@depot"
            environment["XDG_DATA_HOME"] = directory + "/data"
            environment["XDG_STATE_HOME"] = directory + "/state"
            environment["XDG_CONFIG_HOME"] = directory + "/config"
            return try await runTool(
                builtProduct("beaconbench"), arguments, environment: environment, timeout: HostileReadTests.timeout)
        }
    }

    /// One reader: how a hostile `path` is given to the binary, the limit
    /// it reads a file to, and how it says it refused one.
    struct Reader: Sendable {
        let name: String
        let limit: Int
        let limitText: String
        var kinds: [Kind] = Kind.allCases
        let status: Int32
        let run: @Sendable (Place, String) async throws -> ToolOutput
        let says: @Sendable (String, String) -> String
    }

    static let readers: [Reader] = [
        Reader(
            name: "ledger check FILE (a proof file)", limit: 64 << 20, limitText: "64 MiB", status: 1,
            run: { place, path in
                try await place.beaconbench(["ledger", "check", path, "--signers", place.ledger.signers])
            },
            says: { path, why in "ledger check: could not read \(path): \(why)" }),
        Reader(
            name: "ledger check --signers FILE (allowed_signers)", limit: 1 << 20, limitText: "1 MiB", status: 1,
            run: { place, path in
                let proof = place.directory + "/some.proof"
                try "{}".write(toFile: proof, atomically: true, encoding: .utf8)
                return try await place.beaconbench(["ledger", "check", proof, "--signers", path])
            },
            says: { path, why in "ledger check: could not read \(path): \(why)" }),
        Reader(
            name: "ledger verify --since FILE (a checkpoint)", limit: 64 << 10, limitText: "64 KiB", status: 1,
            run: { place, path in
                try await place.beaconbench([
                    "--inventory", place.ledger.inventory, "ledger", "verify", "--since", path,
                ])
            },
            says: { path, why in "ledger verify --since: could not read \(path): \(why)" }),
        Reader(
            name: "ledger verify --since C --signers FILE (allowed_signers)", limit: 1 << 20, limitText: "1 MiB",
            status: 1,
            run: { place, path in
                let checkpoint = place.directory + "/some-checkpoint.txt"
                try "not a checkpoint\n".write(toFile: checkpoint, atomically: true, encoding: .utf8)
                return try await place.beaconbench([
                    "--inventory", place.ledger.inventory, "ledger", "verify", "--since", checkpoint, "--signers", path,
                ])
            },
            says: { path, why in "ledger verify --signers: could not read \(path): \(why)" }),
        Reader(
            name: "ledger checkpoint --key FILE (an SSH key, before ssh-keygen)", limit: 1 << 20,
            limitText: "1 MiB", status: 1,
            run: { place, path in
                try await place.beaconbench([
                    "--inventory", place.ledger.inventory, "ledger", "checkpoint", "--key", path,
                ])
            },
            says: { path, why in "ledger checkpoint: could not read the key \"\(path)\": \(why)" }),
        Reader(
            name: "run FILE (a batch)", limit: 1 << 20, limitText: "1 MiB", status: 1,
            run: { place, path in
                try await place.beaconbench(["--inventory", place.directory + "/batch.sqlite", "run", path])
            },
            says: { path, why in "\(path): \(why)" }),
        // A profile is opened with O_NOFOLLOW (a link is refused as a
        // link, docs/profiles.md), in a directory: /dev/zero itself and a
        // missing file cannot be one of its names.
        Reader(
            name: "--profiles DIR (a profile DIR/car.json)", limit: 1 << 20, limitText: "1 MiB",
            kinds: [.fifo, .zeroLink, .directory, .oversize], status: 1,
            run: { place, path in
                try await place.beaconbench([
                    "--inventory", place.directory + "/profiles.sqlite", "--profiles",
                    (path as NSString).deletingLastPathComponent, "profiles", "list",
                ])
            },
            says: { path, why in
                "\(path): "
                    + (why == "is larger than 1 MiB"
                        ? "larger than 1 MiB" : why.replacingOccurrences(of: "character device", with: "symbolic link"))
            }),
        Reader(
            name: "beaconbench-sim --fault-plan FILE", limit: 1 << 20, limitText: "1 MiB", status: 1,
            run: { _, path in
                try await runTool(
                    builtProduct("beaconbench-sim"), ["--bus", "unix:path=/nonexistent", "--fault-plan", path],
                    timeout: HostileReadTests.timeout)
            },
            says: { path, why in "error: --fault-plan \(path): \(why)" }),
        Reader(
            name: "--sim-fleet FILE (the simulator's fleet file)", limit: 256 << 20, limitText: "256 MiB", status: 3,
            run: { place, path in
                try await place.beaconbench([
                    "--inventory", place.directory + "/fleet.sqlite", "--sim-fleet", path, "scan", "1s",
                ])
            },
            says: { path, why in "\(path): \(why)" }),
        // A state file that does not exist is made; beaconbench refuses a
        // FIFO, a device or a directory itself (OutputFileTests): what is
        // left is the simulator's read of a large one.
        Reader(
            name: "--sim-state FILE (the simulator's state file)", limit: 256 << 20, limitText: "256 MiB",
            kinds: [.oversize], status: 3,
            run: { place, path in
                try await place.beaconbench([
                    "--inventory", place.directory + "/state.sqlite", "--sim", "2", "--sim-state", path, "scan",
                    "1s",
                ])
            },
            says: { path, why in "\(path): \(why)" }),
    ]

    static var cases: [(String, Kind)] {
        readers.flatMap { reader in reader.kinds.map { (reader.name, $0) } }
    }

    @Test(arguments: cases)
    func aHostileFileIsRefusedAtOnceNamingItAndWhy(readerName: String, kind: Kind) async throws {
        let reader = try #require(Self.readers.first { $0.name == readerName })
        let ledger = try await LedgerCommandTests.bench()
        defer { try? FileManager.default.removeItem(atPath: ledger.directory) }
        let directory = ledger.directory + "/hostile"
        try FileManager.default.createDirectory(atPath: directory + "/profiles", withIntermediateDirectories: true)
        chmod(directory, 0o700)
        chmod(directory + "/profiles", 0o700)
        let path = try Self.make(kind, at: directory + "/profiles/car.json", limit: reader.limit)
        let place = Place(directory: directory, ledger: ledger)
        let started = ContinuousClock.now
        let output = try await reader.run(place, path)
        let took = ContinuousClock.now - started
        let expected = reader.says(path, Self.why(kind, limit: reader.limitText))
        #expect(
            output.status == reader.status,
            "\(reader.name), \(kind): exit \(output.status) after \(took)\(took >= .seconds(Self.timeout) ? " (killed at the time limit: it waited)" : ""): \(output.stderr.prefix(600))"
        )
        #expect(
            output.stderr.contains(expected),
            "\(reader.name), \(kind): wanted \(expected)\n\(output.stderr.prefix(600))")
        // Nothing of /dev/zero, nor of the sparse file, reached the output
        // (beaconbench-sim follows its error with its usage, 4 KiB).
        #expect(output.stderr.utf8.count < 8000 && !output.stderr.contains("\u{0}"), "\(output.stderr.prefix(600))")
    }
}
