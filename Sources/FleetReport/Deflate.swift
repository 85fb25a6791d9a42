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

/// zlib's deflate fed a piece at a time (`deflate` with `Z_NO_FLUSH`, then
/// `Z_FINISH`): the stream `Deflate.zlib` makes of the whole, with memory
/// for zlib's state and one piece, not for the whole input.
final class DeflateStream {
    private var stream = z_stream()
    private var open = false
    private var chunk = [UInt8](repeating: 0, count: 64 * 1024)

    /// nil when zlib cannot start (no memory).
    init?(level: Int32 = 9) {
        let status = deflateInit_(&stream, level, zlibVersion(), Int32(MemoryLayout<z_stream>.size))
        guard status == Z_OK else { return nil }
        open = true
    }

    deinit { if open { deflateEnd(&stream) } }

    /// Deflates `bytes`: what comes out so far (maybe nothing), nil when zlib fails.
    func add(_ bytes: [UInt8]) -> [UInt8]? { run(bytes, flush: Z_NO_FLUSH) }

    /// The end of the input: the rest of the stream, nil when zlib fails.
    func finish() -> [UInt8]? { run([], flush: Z_FINISH) }

    private func run(_ bytes: [UInt8], flush: Int32) -> [UInt8]? {
        guard open else { return nil }
        var input = bytes
        var output: [UInt8] = []
        let count = input.count
        let ok = input.withUnsafeMutableBufferPointer { source -> Bool in
            stream.next_in = source.baseAddress
            stream.avail_in = uInt(count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { target -> (Int32, Int) in
                    stream.next_out = target.baseAddress
                    stream.avail_out = uInt(target.count)
                    let status = deflate(&stream, flush)
                    return (status, target.count - Int(stream.avail_out))
                }
                if status == Z_STREAM_ERROR { return false }
                output.append(contentsOf: chunk[0..<produced])
                if flush == Z_FINISH {
                    if status == Z_STREAM_END { return true }
                    if status != Z_OK && status != Z_BUF_ERROR { return false }
                } else if stream.avail_in == 0, produced < chunk.count {
                    return true
                }
            }
        }
        stream.next_in = nil
        return ok ? output : nil
    }
}

/// The zlib the report deflates with, for `beaconbench --version`.
public enum ZlibLibrary {
    public static var version: String { String(cString: zlibVersion()) }
}
