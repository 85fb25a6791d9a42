// `beaconbench-bench office SUBCOMMAND …`: the office at fleet scale
// (issue 31; docs/office.md). Each subcommand lives in its own file of
// this folder and is one case below; the options after the subcommand
// are its own.
//
//   office all …        every scenario below at a size make bench affords
//   office generate …   the fleet generator: N bench inventories with history
//   office sync …       N benches syncing at once (processes) to one server
//   office claims …     identity claims under contention
//   office reads …      the office's reads at fleet scale: time and peak memory
//   office faults …     restart, kill and cut network during syncs
//   office migrate …    a server schema migration applied under syncing benches
//   office check …      the union check: the server holds exactly the benches' rows
import Foundation

func officeMain(_ arguments: [String]) async throws -> Never {
    guard let subcommand = arguments.first else { officeUsage("a subcommand is needed") }
    let rest = Array(arguments.dropFirst())
    switch subcommand {
    case "all": try await officeAll(rest)
    case "migrate": try await officeMigrate(rest)
    case "generate": try await generateFleet(rest)
    case "claims": try await officeClaims(rest)
    case "reads": try await officeReadsMain(rest)
    case "sync": try await officeSync(rest)
    case "check": try await officeCheck(rest)
    case "faults": try await officeFaults(rest)
    default:
        _ = rest
        officeUsage("unknown office subcommand '\(subcommand)'")
    }
}

func officeUsage(_ message: String) -> Never {
    FileHandle.standardError.write(
        Data("error: \(message) (usage: beaconbench-bench office generate|sync|claims|reads|faults|migrate …)\n".utf8))
    exit(2)
}
