import Foundation
import TestSupport
import Testing

/// The release as a bench gets it: the station's unit (systemd-analyze),
/// the Debian packages (lintian, what they hold and depend on), the bill
/// of materials against ldd, and the signed sums. The packages, the bill
/// of materials and the release need the release build (`make deb` builds
/// it; scripts/test builds it under CI): without one those tests are
/// skipped, saying so. One test at a time: each packs and compresses
/// about 120 MB of binaries, and lintian reads them.
@Suite("packaging", .serialized, .timeLimit(.minutes(15)))
struct PackagingTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The release build's directory when both binaries are there and
    /// carry the Swift runtime (ldd names no libswiftCore).
    static let releaseBin: String? = {
        let directory = root + "/.build/release"
        let manager = FileManager.default
        guard manager.isExecutableFile(atPath: directory + "/beaconbench"),
            manager.isExecutableFile(atPath: directory + "/beaconbench-sim")
        else { return nil }
        return directory
    }()
    static let noRelease =
        "skipped: no release build in .build/release (make deb, or scripts/release-build beaconbench beaconbench-sim)"

    static func scratch() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "packaging-\(UUID().uuidString.prefix(8))"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// The unit as shipped but for ExecStart's binary (the built one, so
    /// verify finds it), its man page where `man` finds it.
    @Test func theStationUnitVerifiesAndItsExposureIsAtMost2() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let unit = try String(contentsOfFile: Self.root + "/debian/beaconbench-station@.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/bin/beaconbench station $STATION_ARGS"))
        for directive in [
            "User=beaconbench", "StateDirectory=beaconbench/%i", "Restart=on-failure", "ProtectSystem=strict",
            "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", "SystemCallFilter=@system-service",
        ] {
            #expect(unit.contains("\n" + directive + "\n"), "\(directive) is missing")
        }
        let local = unit.replacingOccurrences(
            of: "ExecStart=/usr/bin/beaconbench", with: "ExecStart=" + builtProduct("beaconbench"))
        let path = directory + "/beaconbench-station@hci0.service"
        try local.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: directory + "/man/man1", withIntermediateDirectories: true)
        let page = try await runTool(builtProduct("beaconbench"), ["help", "--man"])
        try page.stdout.write(toFile: directory + "/man/man1/beaconbench.1", atomically: true, encoding: .utf8)
        let environment = ["PATH": "/usr/bin:/bin", "MANPATH": directory + "/man", "SYSTEMD_COLORS": "0"]

        let verify = try await runTool("/usr/bin/systemd-analyze", ["verify", path], environment: environment)
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        #expect(verify.stderr.isEmpty && verify.stdout.isEmpty, "verify complains: \(verify.stdout) \(verify.stderr)")

        let security = try await runTool(
            "/usr/bin/systemd-analyze", ["security", "--offline=yes", "--threshold=20", "--no-pager", path],
            environment: environment)
        #expect(security.status == 0, "\(security.stdout) \(security.stderr)")
        let overall = try #require(
            security.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }, "\(security.stdout)"
        )
        // "→ Overall exposure level for beaconbench-station@hci0.service: 1.2 OK 🙂"
        let number = overall.split(separator: ": ").last?.split(separator: " ").first.flatMap { Double($0) }
        let exposure = try #require(number, "\(Array(overall.unicodeScalars))")
        #expect(exposure <= 2.0, "\(overall)")
    }

    @Test(.enabled(if: releaseBin != nil, Comment(rawValue: noRelease)))
    func theDebianPackagesAreLintianCleanAndHoldWhatTheySay() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bin = try #require(Self.releaseBin)
        let made = try await runTool(
            "/usr/bin/env", ["BIN=\(bin)", "OUT=\(directory)", Self.root + "/scripts/make-deb"], timeout: 480)
        #expect(made.status == 0, "make-deb (lintian included): \(made.stdout) \(made.stderr)")
        let debs = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".deb") }
            .sorted()
        let main = try #require(debs.first { $0.hasPrefix("beaconbench_") }, "\(debs)")
        let sim = try #require(debs.first { $0.hasPrefix("beaconbench-sim_") }, "\(debs)")

        func field(_ deb: String, _ name: String) async throws -> String {
            try await runTool("/usr/bin/dpkg-deb", ["-f", directory + "/" + deb, name]).stdout
        }
        let depends = try await field(main, "Depends")
        for package in ["libc6", "libpq5", "libssl3", "openssh-client", "dbus"] {
            #expect(depends.contains(package), "Depends lacks \(package): \(depends)")
        }
        #expect(!depends.contains("libswift"), "the Swift runtime is linked in: \(depends)")
        #expect(try await field(main, "Recommends").contains("bluez (>= 5.55)"))
        #expect(try await field(sim, "Depends").contains("dbus-daemon"))

        let contents = try await runTool("/usr/bin/dpkg-deb", ["-c", directory + "/" + main]).stdout
        for file in [
            "./usr/bin/beaconbench", "./usr/share/man/man1/beaconbench.1.gz",
            "./usr/share/bash-completion/completions/beaconbench", "./usr/share/zsh/vendor-completions/_beaconbench",
            "./usr/share/fish/vendor_completions.d/beaconbench.fish", "./usr/share/beaconbench/profiles/car.json",
            "./usr/share/beaconbench/batches/provision-new.batch", "./usr/share/beaconbench/build-info",
            "./usr/share/doc/beaconbench/copyright", "./usr/share/doc/beaconbench/install.md",
            "./usr/share/doc/beaconbench/examples/bluez-group-only.conf",
            "./usr/lib/systemd/system/beaconbench-station@.service", "./usr/lib/sysusers.d/beaconbench.conf",
            "./etc/beaconbench/station.conf",
        ] {
            #expect(contents.contains(" " + file + "\n"), "\(file) is not in \(main)")
        }
        #expect(!contents.contains("beaconbench-sim"), "the simulator is in its own package")
        let simContents = try await runTool("/usr/bin/dpkg-deb", ["-c", directory + "/" + sim]).stdout
        #expect(simContents.contains(" ./usr/bin/beaconbench-sim\n"))
        // The packaged copyright file is the repository's, machine-readable.
        let copyright = try String(contentsOfFile: Self.root + "/debian/copyright", encoding: .utf8)
        #expect(copyright.hasPrefix("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"))
    }

    /// The bill of materials against ldd and the link line: every library
    /// ldd lists is in it as a dynamic link, and nothing else is; every
    /// archive the linker scripts name is in it as a static link; the two
    /// dlopen'd libraries and ssh-keygen are there; each component's
    /// paragraph exists in debian/copyright.
    @Test(.enabled(if: releaseBin != nil, Comment(rawValue: noRelease)))
    func theBillOfMaterialsMatchesWhatTheBinaryLinksAndLoads() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bin = try #require(Self.releaseBin)
        let out = directory + "/sbom.json"
        let made = try await runTool(Self.root + "/scripts/make-sbom", [bin, out, "test"], timeout: 300)
        #expect(made.status == 0, "\(made.stdout) \(made.stderr)")
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out))) as? [String: Any])
        #expect(document["spdxVersion"] as? String == "SPDX-2.3")
        let packages = try #require(document["packages"] as? [[String: Any]])
        let relationships = try #require(document["relationships"] as? [[String: Any]])
        let byID = Dictionary(uniqueKeysWithValues: packages.map { ($0["SPDXID"] as? String ?? "", $0) })
        let copyright = try String(contentsOfFile: Self.root + "/debian/copyright", encoding: .utf8)
        for package in packages {
            #expect((package["licenseDeclared"] as? String).map { !$0.isEmpty } == true, "\(package)")
            if let comment = package["comment"] as? String,
                let paragraph = comment.components(separatedBy: "paragraph ").last,
                comment.contains("paragraph ")
            {
                #expect(copyright.contains("Files: " + paragraph + "\n"), "no \(paragraph) in debian/copyright")
            }
        }
        for binary in ["beaconbench", "beaconbench-sim"] {
            // name → kind, from the relationships of this binary.
            var components: [String: String] = [:]
            for relation in relationships where relation["spdxElementId"] as? String == "SPDXRef-\(binary)" {
                guard let related = relation["relatedSpdxElement"] as? String, let package = byID[related],
                    let name = package["name"] as? String
                else { continue }
                components[name] = relation["comment"] as? String
            }
            let ldd = try await runTool("/usr/bin/ldd", [bin + "/" + binary])
            #expect(ldd.status == 0)
            var loaded: Set<String> = []
            for line in ldd.stdout.split(separator: "\n") {
                let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
                guard let first = words.first, !first.hasPrefix("linux-vdso") else { continue }
                loaded.insert(first.hasPrefix("/") ? URL(fileURLWithPath: first).lastPathComponent : first)
            }
            let dynamic = Set(components.filter { $0.value == "dynamic" }.keys)
            #expect(dynamic == loaded, "\(binary): SBOM \(dynamic.sorted()) against ldd \(loaded.sorted())")
            if binary == "beaconbench" {
                for archive in [
                    "libreadline.a", "libtinfo.a", "libdbus-1.a", "libsqlite3.a", "libz.a", "libswiftCore.a",
                ] {
                    #expect(components[archive] == "static", "\(archive): \(components)")
                }
                #expect(components["libpq.so.5"] == "dlopen")
                #expect(components["libcrypto.so.3"] == "dlopen")
                #expect(components["ssh-keygen"] == "runs")
            }
        }
    }

    /// make release: the sums signed with ssh-keygen -Y sign verify with
    /// the documented command, every file's sum checks, and a changed sums
    /// file does not verify.
    @Test(.enabled(if: releaseBin != nil, Comment(rawValue: noRelease)))
    func aReleaseIsSignedAndVerifiesAsTheDocsSay() async throws {
        let directory = try Self.scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bin = try #require(Self.releaseBin)
        let key = directory + "/release-key"
        let keygen = try await runTool(
            "/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "release@beaconbench", "-f", key])
        #expect(keygen.status == 0, "\(keygen.stderr)")
        let out = directory + "/release"
        let made = try await runTool(
            "/usr/bin/env",
            [
                "BIN=\(bin)", "OUT=\(out)", "BEACONBENCH_RELEASE_KEY=\(key)", "LINTIAN=0",
                Self.root + "/scripts/make-release",
            ],
            timeout: 600)
        #expect(made.status == 0, "\(made.stdout) \(made.stderr)")
        let files = try FileManager.default.contentsOfDirectory(atPath: out).sorted()
        #expect(files.contains { $0.hasSuffix(".tar.xz") } && files.contains { $0.hasSuffix(".spdx.json") }, "\(files)")
        #expect(files.contains("SHA256SUMS") && files.contains("SHA256SUMS.sig"), "\(files)")
        let publicKey = try String(contentsOfFile: key + ".pub", encoding: .utf8)
        let signers = directory + "/allowed_signers"
        try "release@beaconbench namespaces=\"beaconbench-release\" \(publicKey)".write(
            toFile: signers, atomically: true, encoding: .utf8)
        let verify = """
            cd "$1" && ssh-keygen -Y verify -f "$2" -I release@beaconbench -n beaconbench-release \
              -s SHA256SUMS.sig < SHA256SUMS && sha256sum -c SHA256SUMS
            """
        let good = try await runTool("/bin/sh", ["-c", verify, "sh", out, signers])
        #expect(good.status == 0, "\(good.stdout) \(good.stderr)")
        #expect(good.stdout.contains("Good \"beaconbench-release\" signature"), "\(good.stdout)")
        let tampered = try String(contentsOfFile: out + "/SHA256SUMS", encoding: .utf8) + "\n"
        try tampered.write(toFile: out + "/SHA256SUMS", atomically: true, encoding: .utf8)
        let bad = try await runTool("/bin/sh", ["-c", verify, "sh", out, signers])
        #expect(bad.status != 0, "a changed SHA256SUMS verified: \(bad.stdout)")
    }
}
