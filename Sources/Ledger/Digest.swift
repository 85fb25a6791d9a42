import CCrypto

/// A SHA-256 digest (32 bytes), computed by OpenSSL's libcrypto.
public struct Digest: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// A digest read back from storage or a proof: exactly 32 bytes, or nil.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 32 else { return nil }
        self.bytes = bytes
    }

    /// 64 hex digits, or nil.
    public init?(hex: some StringProtocol) {
        guard hex.utf8.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var high: UInt8?
        for unit in hex.utf8 {
            let nibble: UInt8
            switch unit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = unit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = unit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = unit - UInt8(ascii: "A") + 10
            default: return nil
            }
            if let value = high {
                bytes.append(value << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        self.bytes = bytes
    }

    private init(unchecked bytes: [UInt8]) { self.bytes = bytes }

    /// SHA-256 of `message`.
    /// - Throws: `CryptoUnavailable` when libcrypto cannot be loaded.
    public static func sha256(_ message: [UInt8]) throws(CryptoUnavailable) -> Digest {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = message.withUnsafeBytes { input in
            out.withUnsafeMutableBufferPointer { beaconbench_sha256(input.baseAddress, input.count, $0.baseAddress) }
        }
        guard ok == 1 else { throw CryptoUnavailable() }
        return Digest(unchecked: out)
    }

    /// SHA-256 of `prefix` followed by `message`, without joining them.
    public static func sha256(prefix: [UInt8], _ message: [UInt8]) throws(CryptoUnavailable) -> Digest {
        var out = [UInt8](repeating: 0, count: 32)
        let ok = prefix.withUnsafeBytes { first in
            message.withUnsafeBytes { second in
                out.withUnsafeMutableBufferPointer {
                    beaconbench_sha256_2(
                        first.baseAddress, first.count, second.baseAddress, second.count, $0.baseAddress)
                }
            }
        }
        guard ok == 1 else { throw CryptoUnavailable() }
        return Digest(unchecked: out)
    }

    /// 64 lowercase hex digits.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(64)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public var description: String { hex }
}

/// libcrypto (libcrypto.so.3, Debian's libssl3) could not be loaded.
public struct CryptoUnavailable: Error, CustomStringConvertible {
    public let reason: String
    public init() {
        reason = beaconbench_crypto_error().map { String(cString: $0) } ?? "SHA-256 failed"
    }
    public var description: String { "OpenSSL's libcrypto is unusable: \(reason) (install libssl3)" }
}

/// The libcrypto the ledger uses, for `--version -v` and `doctor`.
public enum LibCrypto {
    /// Loads libcrypto.so.3 (if it is not yet) and gives its
    /// OpenSSL_version ("OpenSSL 3.0.15 3 Sep 2024"), or why it cannot be
    /// loaded.
    public static func version() -> (version: String?, problem: String?) {
        if let text = beaconbench_crypto_version() { return (String(cString: text), nil) }
        return (nil, CryptoUnavailable().description)
    }
}
