// swift-tools-version:6.0
//
// beaconbench: a Linux workbench for provisioning fleets of SBeacon vehicle
// beacons over BlueZ. Each layer is one target and talks only to its
// neighbours:
//
//   C shims (CDBus, CSQLite, CReadline, CPostgres, CZlib)
//     → DBusBinding          D-Bus over libdbus-1: values, calls, signals, serving objects
//     → BlueZClient          adapters, devices, GATT over org.bluez
//     → SBeaconProtocol      pure: bytes in, typed values out, no I/O
//     → Workbench            provisioning operations and the fleet runner
//     → Console              REPL, batch language, output
//   Inventory (SQLite) and Profiles sit beside Workbench; FleetReport
//   (the HTML report) reads Inventory and Profiles.
//   BeaconSimulator stands in for bluetoothd and a fleet of beacons.
import PackageDescription

// libdbus-1's headers: the one C library whose headers are not in
// /usr/include. Given to the two targets that import CDBus (DBusBinding
// imports it `internal`, so no other target needs them) rather than by
// pkg-config, whose `-L/usr/lib/…` would come first in every link and
// keep the `beaconbench` executable from its static libraries (CStatic).
#if arch(arm64)
    let multiarch = "aarch64-linux-gnu"
#else
    let multiarch = "x86_64-linux-gnu"
#endif
let dbusHeaders: [SwiftSetting] = [
    .unsafeFlags([
        "-Xcc", "-I/usr/include/dbus-1.0", "-Xcc", "-I/usr/lib/\(multiarch)/dbus-1.0/include",
    ])
]

let package = Package(
    name: "beaconbench",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "beaconbench", targets: ["beaconbench"]),
        .executable(name: "beaconbench-sim", targets: ["beaconbench-sim"]),
        .library(name: "DBusBinding", targets: ["DBusBinding"]),
    ],
    targets: [
        // MARK: C libraries from Debian, one system-library target each.
        // Headers from /usr/include, linked by their module maps (`link`);
        // no pkg-config (see dbusHeaders above).
        .systemLibrary(
            name: "CDBus",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // libpq's declarations (libpq-dev), its functions loaded on first
        // use (libpq.c): linking it would cost every start about 5 ms.
        .target(
            name: "CPostgres",
            cSettings: [.unsafeFlags(["-I/usr/include/postgresql"])],
            linkerSettings: [.linkedLibrary("dl")]
        ),
        // SHA-256 from OpenSSL's libcrypto (libssl3), for the ledger's
        // Merkle tree and digests; loaded on first use (libcrypto.c), as
        // libpq is, so a start that hashes nothing does not load it.
        .target(name: "CCrypto", linkerSettings: [.linkedLibrary("dl")]),
        // Deflate, for the fleet report's device table (browsers inflate it
        // with DecompressionStream).
        .systemLibrary(
            name: "CZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        .systemLibrary(
            name: "CReadline",
            providers: [.apt(["libreadline-dev"])]
        ),
        // The `beaconbench` executable links libdbus-1, SQLite, zlib and
        // readline (with libtinfo) statically: Sources/CStatic/link holds a
        // linker script per library (`libdbus-1.so` reading
        // `INPUT(libdbus-1.a)`…), found first by `-ldbus-1` and the others;
        // sd_stubs.c stands in for the two libsystemd functions libdbus-1.a
        // names. Nothing more to load at start (docs/benchmarks.md,
        // "Start-up"); the library product and the tests link as before.
        .target(name: "CStatic", exclude: ["link"]),

        // MARK: Layers.
        .target(name: "DBusBinding", dependencies: ["CDBus"], swiftSettings: dbusHeaders),
        .target(name: "BlueZClient", dependencies: ["DBusBinding"]),
        .target(name: "SBeaconProtocol"),
        // Text from outside (devices, files) made safe for a terminal, a
        // spreadsheet (CSV) and JSON.
        .target(name: "SafeText"),
        // The ledger's pure parts: RFC 9162 Merkle trees and their proofs.
        .target(name: "Ledger", dependencies: ["CCrypto", "SafeText"]),
        .target(name: "Inventory", dependencies: ["CSQLite", "SBeaconProtocol", "Profiles", "SafeText", "Ledger"]),
        .target(name: "Profiles", dependencies: ["SBeaconProtocol", "SafeText"]),
        // Pushing a bench's inventory to a shared PostgreSQL server.
        .target(
            name: "InventorySync", dependencies: ["Inventory", "CPostgres", "Ledger", "SafeText"],
            swiftSettings: [.unsafeFlags(["-Xcc", "-I/usr/include/postgresql"])]),
        // The fleet report: an inventory's numbers as one self-contained HTML page.
        // Its style sheet and script are Assets/report.css and report.js,
        // embedded as ReportAssets.swift by scripts/gen-report-assets.
        .target(
            name: "FleetReport", dependencies: ["Inventory", "Profiles", "SBeaconProtocol", "SafeText", "CZlib"],
            exclude: ["Assets"]),
        .target(
            name: "Workbench",
            dependencies: ["BlueZClient", "SBeaconProtocol", "Inventory", "Profiles", "SafeText", "LocalBus"]
        ),
        .target(
            name: "Console",
            dependencies: [
                "Workbench", "Inventory", "InventorySync", "Profiles", "SBeaconProtocol", "SafeText", "LocalBus",
                "FleetReport", "CReadline", "Ledger",
            ]),
        .target(name: "BeaconSimulator", dependencies: ["DBusBinding", "SBeaconProtocol", "SafeText"]),
        // A private dbus-daemon and the simulator as child processes, for
        // `beaconbench --sim`, the benchmarks and the tests.
        .target(name: "LocalBus", dependencies: ["SafeText"]),

        // MARK: Thin executables.
        .executableTarget(
            name: "beaconbench", dependencies: ["Console", "CStatic"],
            linkerSettings: [.unsafeFlags(["-L" + Context.packageDirectory + "/Sources/CStatic/link"])]),
        .executableTarget(name: "beaconbench-sim", dependencies: ["BeaconSimulator"]),
        // libFuzzer targets (scripts/fuzz) or, built normally, a replayer of
        // saved inputs (the test suite runs it over Tests/Fuzz).
        .executableTarget(
            name: "beaconbench-fuzz",
            dependencies: [
                "Console", "Profiles", "SBeaconProtocol", "SafeText", "DBusBinding", "Inventory", "InventorySync",
            ]),
        .executableTarget(
            name: "beaconbench-bench",
            dependencies: [
                "DBusBinding", "TestSupport", "LocalBus", "BeaconSimulator", "Inventory", "InventorySync", "Profiles",
                "SBeaconProtocol", "Ledger", "CPostgres", "SafeText",
            ],
            // libpq's headers, for the office's union check (Office/OfficePostgres.swift).
            swiftSettings: [.unsafeFlags(["-Xcc", "-I/usr/include/postgresql"])]),

        // MARK: Tests and what they share.
        .target(name: "TestSupport", dependencies: ["DBusBinding", "LocalBus"]),
        .testTarget(
            name: "DBusBindingTests", dependencies: ["DBusBinding", "TestSupport", "CDBus"], swiftSettings: dbusHeaders),
        .testTarget(name: "SBeaconProtocolTests", dependencies: ["SBeaconProtocol"]),
        .testTarget(name: "LedgerTests", dependencies: ["Ledger"]),
        .testTarget(name: "InventoryTests", dependencies: ["Inventory", "Profiles", "SBeaconProtocol", "TestSupport"]),
        .testTarget(name: "SafeTextTests", dependencies: ["SafeText", "TestSupport"]),
        .testTarget(name: "ProfilesTests", dependencies: ["Profiles", "SBeaconProtocol"]),
        .testTarget(
            name: "FleetReportTests",
            dependencies: ["FleetReport", "Inventory", "Profiles", "SBeaconProtocol", "SafeText", "TestSupport"],
            exclude: ["Golden"]),
        .testTarget(
            name: "ConsoleTests",
            dependencies: [
                "Console", "Profiles", "SBeaconProtocol", "Workbench", "Inventory", "InventorySync", "BeaconSimulator",
                "DBusBinding", "TestSupport",
            ]),
        .testTarget(
            name: "WorkbenchTests",
            dependencies: [
                "Workbench", "BlueZClient", "BeaconSimulator", "SBeaconProtocol", "DBusBinding", "TestSupport",
            ]),
        .testTarget(
            name: "SimulatorTests",
            dependencies: ["BeaconSimulator", "SBeaconProtocol", "DBusBinding", "TestSupport"]),
    ]
)
