import Foundation
import Inventory
import LocalBus
import TestSupport
import Testing

@testable import InventorySync

/// A bench's pull of the fleet's assignments comes a page at a time
/// (`PulledPages`): what it takes and refuses is the same whatever the
/// page, the rows of one device in other letter cases are refused together
/// even where a page would split them, and its peak memory does not grow
/// with the rows pulled.
@Suite("sync: the pull by pages", .serialized, .exclusive(.postgreSQL), .timeLimit(.minutes(10)))
struct PulledPagesTests {
    static let columns = "address, profile, major, minor_policy, minor, overrides, assigned_at, assigned_by, origin"

    /// `count` valid assignments to `van` under major 250, addresses
    /// `C5:00:` and the number in four hex octets (SQL).
    static func assignments(_ count: Int) -> String {
        """
        INSERT INTO fleet_assignments (\(columns))
        SELECT 'C5:00:' || regexp_replace(lpad(upper(to_hex(i)), 8, '0'), '(..)(..)(..)(..)', '\\1:\\2:\\3:\\4'),
               'van', 250, 'auto', NULL, '{}', '2026-12-02T10:00:00.000Z', 'office@hq', 'office'
        FROM generate_series(1, \(count)) AS i;
        """
    }

    @Test func whatAPullTakesAndRefusesIsTheSameWhateverThePage() async throws {
        try await withSyncScene("pull-pages") { scene in
            let profiles: Set<String> = ["car", "van"]
            let setup = try Inventory(path: scene.directory + "/setup.sqlite")
            _ = try await ServerAssignments.exchange(setup, url: scene.server.url, profiles: profiles)
            // Nine good rows; device 05 in two letter cases (refused
            // together); a row that names no device; one with a bad major.
            _ = try await scene.server.psql(
                Self.assignments(9) + """
                    INSERT INTO fleet_assignments (\(Self.columns)) VALUES
                      ('c5:00:00:00:00:05', 'car', 1, 'auto', NULL, '{}', '2026-12-02T11:00:00.000Z', 'x', 'office'),
                      ('C5:00:00:00:00:0', 'car', 1, 'auto', NULL, '{}', '2026-12-02T11:00:00.000Z', 'x', 'office'),
                      ('C5:00:00:00:00:0A', 'car', 99999999, 'auto', NULL, '{}', '2026-12-02T11:00:00.000Z',
                       'x', 'office');
                    """)
            var outcomes: [String] = []
            for page in [1, 2, 3, 4, 5, 6, 7, 5_000] {
                let inventory = try Inventory(path: scene.directory + "/page-\(page).sqlite")
                let first = try await ServerAssignments.exchange(
                    inventory, url: scene.server.url, profiles: profiles, page: page)
                let held = try await inventory.assignments().map(\.address)
                #expect(first.pulled == 8, "page \(page): \(first)")
                #expect(held.count == 8 && !held.contains("C5:00:00:00:00:05"), "page \(page): \(held)")
                let refused = first.refused.map { "\($0.key) \($0.field)" }
                #expect(
                    refused == [
                        "C5:00:00:00:00:0 address", "C5:00:00:00:00:05 address", "C5:00:00:00:00:0A major",
                        "c5:00:00:00:00:05 address",
                    ], "page \(page): \(refused)")
                outcomes.append("\(held) \(refused)")
                // Incremental: nothing new, the refused rows checked again.
                let again = try await ServerAssignments.exchange(
                    inventory, url: scene.server.url, profiles: profiles, page: page)
                #expect(again.pulled == 0 && again.refused.count == 4, "page \(page): \(again)")
            }
            #expect(Set(outcomes).count == 1, "\(outcomes)")
        }
    }

    /// The peak RSS of `beaconbench sync` pulling 10,000 and then 40,000
    /// assignments into a new bench, in a child process (`wait4`): the
    /// larger within 12 MB of the smaller. Held whole, as before, the pull
    /// grew by about 1.3 KB per row (+39 MB here).
    @Test func peakMemoryOfAPullDoesNotGrowWithTheRowsPulled() async throws {
        try await withSyncScene("pull-memory") { scene in
            try await scene.makeSchema()
            var peaks: [Double] = []
            for (number, count) in [10_000, 40_000].enumerated() {
                _ = try await scene.server.psql("TRUNCATE fleet_assignments; " + Self.assignments(count))
                let run = try await runTool(
                    "/usr/bin/python3",
                    [
                        "-c", ReportMemoryTests.measure, builtProduct("beaconbench"), "--profiles",
                        ConsoleFixture.repository + "/profiles", "--inventory",
                        scene.directory + "/bench-\(number).sqlite", "--json", "sync", "--to", scene.server.url,
                    ],
                    environment: [
                        "NO_COLOR": "1", "HOME": scene.directory, "XDG_DATA_HOME": scene.directory + "/data",
                        "XDG_CONFIG_HOME": scene.directory + "/config",
                    ], timeout: 600)
                #expect(run.status == 0, "\(count): \(run.stderr.suffix(800))")
                let report = ConsoleFixture.jsonLines(run.stdout, kind: "sync").first
                #expect(report?["assignments_pulled"] as? Int == count, "\(count): \(run.stdout.suffix(800))")
                let peak = run.stderr.split(separator: "\n").last { $0.hasPrefix("peak ") }
                    .flatMap { Double($0.dropFirst(5)) }
                let mib = (peak ?? .infinity) / 1024
                print("sync pulling \(count) assignments: peak RSS \(mib) MiB")
                peaks.append(mib)
            }
            #expect(peaks[1] < peaks[0] + 12, "peak RSS grew from \(peaks[0]) to \(peaks[1]) MiB, 4 × the rows")
        }
    }
}
