// beaconbench-fuzz: built two ways.
//
// With `-DFUZZING -sanitize=fuzzer` (scripts/fuzz): a libFuzzer target; the
// FUZZ_TARGET environment variable picks what the bytes go to.
// Otherwise: `beaconbench-fuzz replay TARGET FILE|DIR…` runs saved inputs
// (the seed corpora and every crash ever found, under Tests/Fuzz) through
// the same code, as the test suite does; `beaconbench-fuzz seed TARGET DIR`
// writes the seed corpus.
import Foundation

#if FUZZING
    let selectedTarget: FuzzTarget = {
        guard let name = ProcessInfo.processInfo.environment["FUZZ_TARGET"], let target = FuzzTarget(rawValue: name)
        else {
            let known = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
            FileHandle.standardError.write(Data("set FUZZ_TARGET to one of: \(known)\n".utf8))
            exit(2)
        }
        return target
    }()

    @_cdecl("LLVMFuzzerTestOneInput")
    public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
        selectedTarget.exercise(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
        return 0
    }

    /// libFuzzer's driver, for an executable whose `main` SwiftPM names.
    @_silgen_name("LLVMFuzzerRunDriver")
    func runFuzzerDriver(
        _ argc: UnsafeMutablePointer<Int32>,
        _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
        _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
    ) -> Int32

    /// SwiftPM links an executable's `main` to `<module>_main`.
    @_cdecl("beaconbench_fuzz_main")
    public func fuzzMain(
        _ argc: Int32, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
    ) -> Int32 {
        var count = argc
        var arguments = argv
        return runFuzzerDriver(&count, &arguments) { data, size in fuzzOneInput(data, size) }
    }
#else
    @main
    struct FuzzReplay {
        static func main() throws {
            let arguments = Array(CommandLine.arguments.dropFirst())
            guard arguments.count >= 2, let target = FuzzTarget(rawValue: arguments[1]) else {
                let known = FuzzTarget.allCases.map(\.rawValue).joined(separator: "|")
                FileHandle.standardError.write(
                    Data("usage: beaconbench-fuzz replay \(known) FILE|DIR… | seed \(known) DIR\n".utf8))
                exit(1)
            }
            switch arguments[0] {
            case "seed":
                let directory = arguments.count > 2 ? arguments[2] : "."
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                for (index, seed) in try target.seeds().enumerated() {
                    try Data(seed).write(to: URL(fileURLWithPath: directory).appendingPathComponent("seed-\(index)"))
                }
            case "replay":
                var count = 0
                // For dbus-wire, how the inputs were judged (a target whose
                // inputs all end as "not mine" would check nothing).
                var verdicts: [String: Int] = [:]
                for path in arguments.dropFirst(2) {
                    var isDirectory: ObjCBool = false
                    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { continue }
                    let files =
                        isDirectory.boolValue
                        ? try FileManager.default.contentsOfDirectory(atPath: path).sorted().map { path + "/" + $0 }
                        : [path]
                    for file in files {
                        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: file)))
                        target.exercise(bytes)
                        count += 1
                        if let key = target.verdict(bytes) { verdicts[key, default: 0] += 1 }
                    }
                }
                print("\(target.rawValue): \(count) inputs replayed")
                if !verdicts.isEmpty {
                    print(verdicts.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))
                }
            default:
                FileHandle.standardError.write(Data("unknown action '\(arguments[0])' (replay, seed)\n".utf8))
                exit(1)
            }
        }
    }
#endif
