import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// Server locators (docs/office.md, "Server locators"): a `key=value`
/// connection string is a server, always; what is neither a path nor a
/// connection string is refused; a password is never shown, never a file
/// name, never in the inventory. And the transport: a server that is not
/// local without a verified certificate is warned about, or refused with
/// `--require-tls`.
@Suite("server locators and their passwords", .timeLimit(.minutes(3)))
struct ServerLocatorTests {
    static let secret = "Zq7SECRETpw9x"

    /// beaconbench run in `directory` (its working directory and home):
    /// exit status, stdout, stderr.
    static func run(_ directory: String, _ arguments: [String]) throws -> (status: Int32, out: String, err: String) {
        let child = try ChildProcess(
            "/usr/bin/env",
            [
                "-C", directory, "HOME=\(directory)", "XDG_DATA_HOME=\(directory)/data",
                "XDG_CONFIG_HOME=\(directory)/config", "PGCONNECT_TIMEOUT=3", builtProduct("beaconbench"),
            ] + arguments, standardOutput: directory + "/.out", standardError: directory + "/.err")
        let status = child.waitForExit().status
        let out = (try? String(contentsOfFile: directory + "/.out", encoding: .utf8)) ?? ""
        let err = (try? String(contentsOfFile: directory + "/.err", encoding: .utf8)) ?? ""
        return (status >> 8, out, err)
    }

    /// Every path under `directory`.
    static func names(_ directory: String) -> [String] {
        (FileManager.default.enumerator(atPath: directory)?.allObjects as? [String]) ?? []
    }

    @Test func theKindOfEachLocator() {
        #expect(ServerLocator.kind("postgresql://u@db/fleet") == .server)
        #expect(ServerLocator.kind("host=db dbname=fleet password=\(Self.secret)") == .server)
        #expect(ServerLocator.kind("dbname=fleet") == .server)
        #expect(ServerLocator.kind("/var/lib/beaconbench/inventory.sqlite") == .path)
        #expect(ServerLocator.kind("inventory=old.sqlite") == .path)
        guard case .invalid(let reason) = ServerLocator.kind("host=db dbname password=\(Self.secret)") else {
            Issue.record("a broken connection string was not refused")
            return
        }
        #expect(!reason.contains(Self.secret), "\(reason)")
        guard case .invalid = ServerLocator.kind("postgresql://u:\(Self.secret)@db/x?sslmode=bogus&x=1=") else {
            Issue.record("a broken URL was not refused")
            return
        }
    }

    /// `--inventory` given a `key=value` string with a password reads a
    /// server (here: none listening, exit 3; the sync given 1 s to retry), makes no file, and shows no
    /// password; `sync --to` the same records no password in the bench's
    /// inventory (its runs, its file's bytes).
    @Test func aKeyValueStringWithAPasswordIsAServerAndItsPasswordGoesNowhere() throws {
        let directory = try scratchDirectory("locator")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let locator = "host=\(directory)/no-socket port=5 dbname=fleet user=office password=\(Self.secret)"
        let read = try Self.run(directory, ["--inventory", locator, "inventory"])
        #expect(read.status == 3, "\(read.err)")
        #expect(!read.out.contains(Self.secret) && !read.err.contains(Self.secret), "\(read.out) \(read.err)")
        #expect(!read.err.contains("empty"), "\(read.err)")
        #expect(Self.names(directory).allSatisfy { !$0.contains(Self.secret) && !$0.contains("dbname") })
        #expect(!FileManager.default.fileExists(atPath: directory + "/data/beaconbench"), "a local inventory was made")

        // Neither a path nor a connection string: refused, exit 1.
        let broken = try Self.run(directory, ["--inventory", "host=db dbname password=\(Self.secret)", "inventory"])
        #expect(broken.status == 1, "\(broken.err)")
        #expect(!broken.err.contains(Self.secret), "\(broken.err)")
        let notAServer = try Self.run(directory, ["--server", directory + "/somewhere.sqlite", "inventory"])
        #expect(notAServer.status == 1, "\(notAServer.err)")

        // A sync to it: refused at once (nothing listens), nothing of the password kept.
        let inventory = directory + "/bench.sqlite"
        _ = try Inventory(path: inventory)
        let sync = try Self.run(directory, ["--inventory", inventory, "sync", "--to", locator, "--retry-for", "1s"])
        #expect(sync.status == 3, "\(sync.err)")
        #expect(!sync.out.contains(Self.secret) && !sync.err.contains(Self.secret), "\(sync.err)")
        for name in Self.names(directory) where !name.hasPrefix(".") {
            #expect(!name.contains(Self.secret))
            let bytes = (try? Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))) ?? Data()
            #expect(bytes.range(of: Data(Self.secret.utf8)) == nil, "\(name) holds the password")
        }
    }

    /// A server that is not local, without sslmode=verify-full or
    /// verify-ca: a warning naming the risk, then the connection (none
    /// listens at 127.0.0.2 here: exit 3); with `--require-tls`, or
    /// BEACONBENCH_REQUIRE_TLS=1, refused before connecting.
    @Test func aRemoteServerWithoutVerifiedTLSIsWarnedAboutOrRefused() throws {
        let directory = try scratchDirectory("tls")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let remote = "hostaddr=127.0.0.2 host=db.example port=1 dbname=fleet"
        let warned = try Self.run(directory, ["--inventory", remote, "inventory"])
        #expect(warned.status == 3, "\(warned.err)")
        #expect(warned.err.contains("db.example") && warned.err.contains("plaintext"), "\(warned.err)")
        let required = try Self.run(
            directory, ["--require-tls", "--inventory", remote + " sslmode=require", "inventory"])
        #expect(required.status == 3, "\(required.err)")
        #expect(required.err.contains("--require-tls") && required.err.contains("not checked"), "\(required.err)")
        let verified = try Self.run(
            directory, ["--require-tls", "--inventory", remote + " sslmode=verify-full", "inventory"])
        #expect(!verified.err.contains("--require-tls"), "\(verified.err)")
        let local = try Self.run(
            directory, ["--require-tls", "--inventory", "host=127.0.0.1 port=1 dbname=x", "inventory"])
        #expect(!local.err.contains("--require-tls") && !local.err.contains("plaintext"), "\(local.err)")
    }
}
