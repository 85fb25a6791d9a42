import Testing

@testable import DBusBinding

/// The wire decoder held against libdbus in the suite: every seed of the
/// `dbus-wire` fuzz target, then 20,000 deterministic mutations of them,
/// through the same verdict as the fuzz target (`WireDifferential.check`):
/// the same header and body, or the same refusal, or the same error.
@Suite("The wire decoder agrees with libdbus", .timeLimit(.minutes(3)))
struct WireDifferentialTests {
    /// Per byte order: the expected verdict of each seed, in the order
    /// `WireDifferential.seeds()` writes them.
    static let expected: [WireDifferential.Verdict] = [
        .fast(.propertiesChanged), .fast(.propertiesChanged), .fast(.interfacesAdded), .fast(.interfacesAdded),
        .fast(.interfacesRemoved), .fast(.managedObjects), .generic, .generic, .generic, .generic,
        .sameError("org.freedesktop.DBus.Error.NotSupported"), .sameError("org.freedesktop.DBus.Error.NotSupported"),
        .fast(.propertiesChanged), .fast(.propertiesChanged), .refused, .refused, .refused,
    ]

    @Test func everySeedGivesItsVerdictInBothByteOrders() throws {
        let seeds = WireDifferential.seeds()
        #expect(seeds.count == 2 * Self.expected.count)
        for (index, seed) in seeds.enumerated() {
            let verdict = try WireDifferential.check(seed).get()
            #expect(
                verdict == Self.expected[index % Self.expected.count],
                "seed \(index) (\(index < Self.expected.count ? "little" : "big")-endian): \(verdict)")
        }
    }

    /// SplitMix64: a fixed sequence, so every run checks the same inputs.
    struct Generator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }
    }

    static let interesting: [UInt8] = [
        0, 1, 2, 0x7F, 0x80, 0xFF, 0xC0, 0xED, 0xF4, UInt8(ascii: "a"), UInt8(ascii: "{"), UInt8(ascii: "}"),
        UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "v"), UInt8(ascii: "h"), UInt8(ascii: "y"),
        UInt8(ascii: "s"), UInt8(ascii: "o"), UInt8(ascii: "g"), UInt8(ascii: "q"), UInt8(ascii: "B"),
        UInt8(ascii: "l"), UInt8(ascii: "/"), UInt8(ascii: "."),
    ]

    /// One structured mutation: a byte set to a random or a telling value,
    /// a length word moved by a little, a signature byte swapped, a cut, or
    /// a byte inserted or removed (which shifts every alignment after it).
    static func mutate(_ input: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = input
        guard !bytes.isEmpty else { return bytes }
        switch random.below(7) {
        case 0: bytes[random.below(bytes.count)] = UInt8(truncatingIfNeeded: random.next())
        case 1: bytes[random.below(bytes.count)] = interesting[random.below(interesting.count)]
        case 2:
            let offset = random.below(bytes.count / 4) * 4
            if offset + 4 <= bytes.count {
                let bigEndian = bytes[0] == UInt8(ascii: "B")
                var value: UInt32 = 0
                for k in 0..<4 { value |= UInt32(bytes[offset + k]) << (bigEndian ? 8 * (3 - k) : 8 * k) }
                value = value &+ UInt32(bitPattern: Int32(random.below(17) - 8))
                for k in 0..<4 {
                    bytes[offset + k] = UInt8(truncatingIfNeeded: value >> (bigEndian ? 8 * (3 - k) : 8 * k))
                }
            }
        case 3:
            // A type code where a signature or type code sits.
            let codes = Array("ybnqiuxtdsogvah(){}".utf8)
            let candidates = bytes.indices.filter { codes.contains(bytes[$0]) }
            if let index = candidates.isEmpty ? nil : candidates[random.below(candidates.count)] {
                bytes[index] = codes[random.below(codes.count)]
            }
        case 4: bytes.removeSubrange(random.below(bytes.count)...)
        case 5: bytes.insert(interesting[random.below(interesting.count)], at: random.below(bytes.count))
        default: bytes.remove(at: random.below(bytes.count))
        }
        return bytes
    }

    @Test func twentyThousandMutationsAgree() {
        let seeds = WireDifferential.seeds()
        var random = Generator(state: 30)
        var counts: [String: Int] = [:]
        var mismatches: [String] = []
        for _ in 0..<20_000 {
            var bytes = seeds[random.below(seeds.count)]
            for _ in 0...random.below(3) { bytes = Self.mutate(bytes, &random) }
            switch WireDifferential.check(bytes) {
            case .success(let verdict):
                let key: String =
                    switch verdict {
                    case .fast: "fast"
                    case .sameError: "same error"
                    default: verdict.description
                    }
                counts[key, default: 0] += 1
            case .failure(let mismatch):
                if mismatches.count < 5 {
                    mismatches.append(
                        "\(mismatch) — input \(bytes.map { String($0, radix: 16) }.joined(separator: " "))")
                }
                counts["mismatch", default: 0] += 1
            }
        }
        #expect(mismatches.isEmpty, "\(counts)\n\(mismatches.joined(separator: "\n"))")
        // Not vacuous: many inputs reach the fast decoder, many are refused.
        #expect(counts["fast", default: 0] > 500, "\(counts)")
        #expect(counts["refused by both", default: 0] > 2_000, "\(counts)")
        #expect(counts["not mine", default: 0] < 200, "\(counts)")
    }
}
