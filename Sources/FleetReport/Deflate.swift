import CZlib
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// zlib's deflate (`compress2`), the one call into the C library: the
/// fleet report's device table travels deflated and base64-encoded, and
/// the page inflates it with the browser's `DecompressionStream("deflate")`.
enum Deflate {
    /// `bytes` in the zlib format (RFC 1950), or nil when zlib fails.
    static func zlib(_ bytes: [UInt8], level: Int32 = 9) -> [UInt8]? {
        var length = compressBound(uLong(bytes.count))
        var output = [UInt8](repeating: 0, count: Int(length))
        let status = output.withUnsafeMutableBufferPointer { target in
            bytes.withUnsafeBufferPointer { source in
                compress2(target.baseAddress, &length, source.baseAddress, uLong(source.count), level)
            }
        }
        guard status == Z_OK else { return nil }
        return Array(output.prefix(Int(length)))
    }
}
