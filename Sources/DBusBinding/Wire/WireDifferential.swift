/// The fast decoder held against libdbus: the same bytes through both, the
/// same result or the same refusal. Used by the `dbus-wire` fuzz target and
/// by `WireDifferentialTests`.
public enum WireDifferential {
    /// What one input showed (all of these are agreements).
    public enum Verdict: Sendable, Equatable, CustomStringConvertible {
        /// Both accepted; the fast decoder's mirror built the same body as
        /// libdbus + `MessageCodec.decodeBody` (or both threw the same error).
        case fast(BlueZShape)
        /// Both accepted; `WireWalker` built the same body.
        case generic
        /// Both refused the bytes.
        case refused
        /// Both accepted the bytes and both decoders threw the same error.
        case sameError(String)
        /// The wire decoder left the message to libdbus (`unsupported`).
        case notMine

        public var description: String {
            switch self {
            case .fast(let shape): "fast \(shape)"
            case .generic: "generic"
            case .refused: "refused by both"
            case .sameError(let name): "same error \(name)"
            case .notMine: "not mine"
            }
        }
    }

    public struct Mismatch: Error, CustomStringConvertible {
        public let description: String
    }

    /// Runs one input through both sides.
    ///
    /// The input is cut to the length its fixed header announces (libdbus
    /// would also try to read the bytes after it as a next message); a
    /// header with `UNIX_FDS = n > 0` gets n patched to 0 for both sides, as
    /// the reader does once it has taken the descriptors.
    public static func check(_ input: [UInt8]) -> Result<Verdict, Mismatch> {
        var bytes = input
        if let fixed = bytes.withUnsafeBytes({ try? HeaderView.Fixed.parse($0) }), fixed.totalLength < bytes.count {
            bytes.removeSubrange(fixed.totalLength...)
        }
        if let offset = bytes.withUnsafeBytes({ (try? HeaderView.parse($0))?.unixFDsOffset }) {
            for index in offset..<(offset + 4) { bytes[index] = 0 }
        }
        let reference = LibDBus.messageDemarshal(bytes)
        defer { reference.map(LibDBus.messageUnref) }
        return bytes.withUnsafeBytes { buffer -> Result<Verdict, Mismatch> in
            let view: WireMessageView
            do throws(WireRefusal) {
                view = try WireMessageView(validating: buffer)
            } catch {
                switch error.kind {
                case .unsupported: return .success(.notMine)
                case .invalid:
                    if reference == nil { return .success(.refused) }
                    return .failure(Mismatch(description: "the wire decoder refused (\(error)); libdbus accepted"))
                }
            }
            guard let reference else {
                return .failure(Mismatch(description: "the wire decoder accepted; libdbus refused"))
            }
            if let difference = headerDifference(view.header, reference) {
                return .failure(Mismatch(description: "header: \(difference)"))
            }
            let expected = Result { try MessageCodec.decodeBody(of: reference) }
            let shape = BlueZShape(signature: view.header.signature)
            let actual: Result<[BusValue], Error>
            if let shape {
                var mirror = MirrorSink()
                BlueZDecoder.decode(view, names: .blueZ(), paths: InternTable(maximumNames: 1 << 16), into: &mirror)
                actual = Result { try mirror.body(shape) }
            } else {
                actual = Result { try view.busValues() }
            }
            switch (expected, actual) {
            case (.success(let a), .success(let b)):
                guard a.count == b.count, zip(a, b).allSatisfy(identical) else {
                    return .failure(
                        Mismatch(
                            description:
                                "bodies differ:\n libdbus \(String(describing: a).prefix(600))\n wire    \(String(describing: b).prefix(600))"
                        ))
                }
                return .success(shape.map(Verdict.fast) ?? .generic)
            case (.failure(let a), .failure(let b)):
                let nameA = (a as? BusError)?.name.rawValue ?? "\(a)"
                let nameB = (b as? BusError)?.name.rawValue ?? "\(b)"
                guard nameA == nameB else {
                    return .failure(Mismatch(description: "errors differ: libdbus side \(a), wire side \(b)"))
                }
                return .success(.sameError(nameA))
            case (.failure(let a), .success):
                return .failure(Mismatch(description: "decodeBody threw \(a); the wire decoder did not"))
            case (.success, .failure(let b)):
                return .failure(Mismatch(description: "the wire decoder threw \(b); decodeBody did not"))
            }
        }
    }

    private static func headerDifference(_ header: HeaderView, _ message: OpaquePointer) -> String? {
        func same(_ field: HeaderView.Field, _ value: UnsafePointer<CChar>?) -> Bool {
            let ours = header.string(field)
            let theirs = value.map { String(cString: $0) }
            // libdbus gives "" for an absent signature.
            if field == .signature { return (ours ?? "") == (theirs ?? "") }
            return ours == theirs
        }
        if UInt8(truncatingIfNeeded: LibDBus.messageGetType(message)) != header.type { return "type" }
        if LibDBus.messageGetSerial(message) != header.serial { return "serial" }
        if LibDBus.messageGetReplySerial(message) != (header.replySerial ?? 0) { return "reply serial" }
        if LibDBus.messageGetNoReply(message) != (header.fixed.flags & 1 != 0) { return "no-reply flag" }
        if !same(.path, LibDBus.messageGetPath(message)) { return "path" }
        if !same(.interface, LibDBus.messageGetInterface(message)) { return "interface" }
        if !same(.member, LibDBus.messageGetMember(message)) { return "member" }
        if !same(.errorName, LibDBus.messageGetErrorName(message)) { return "error name" }
        if !same(.destination, LibDBus.messageGetDestination(message)) { return "destination" }
        if !same(.sender, LibDBus.messageGetSender(message)) { return "sender" }
        if !same(.signature, LibDBus.messageGetSignature(message)) { return "signature" }
        return nil
    }

    /// Equality with doubles compared by bit pattern (NaN equals NaN).
    public static func identical(_ a: BusValue, _ b: BusValue) -> Bool {
        switch (a, b) {
        case (.double(let x), .double(let y)): return x.bitPattern == y.bitPattern
        case (.variant(let x), .variant(let y)): return identical(x, y)
        case (.array(let tx, let x), .array(let ty, let y)):
            return tx == ty && x.count == y.count && zip(x, y).allSatisfy(identical)
        case (.structure(let x), .structure(let y)): return x.count == y.count && zip(x, y).allSatisfy(identical)
        case (.dictionary(let kx, let vx, let x), .dictionary(let ky, let vy, let y)):
            return kx == ky && vx == vy && x.count == y.count
                && zip(x, y).allSatisfy { identical($0.key, $1.key) && identical($0.value, $1.value) }
        default: return a == b
        }
    }
}

/// A sink that builds the `BusValue` body libdbus + `MessageCodec.decodeBody`
/// would build for the same message: the fast decoder's differential twin.
public struct MirrorSink: WirePropertySink {
    private var objects: [(path: String, interfaces: [(name: String, entries: [BusValue.DictEntry])])] = []
    private var invalidatedNames: [String] = []
    private var removed: [String] = []
    private var firstError: Error?

    public init() {}

    public mutating func beginObject(path: WireName) { objects.append((path.string, [])) }
    public mutating func interface(_ name: WireName) {
        objects[objects.count - 1].interfaces.append((name.string, []))
    }
    public mutating func property(_ name: WireName, _ value: WireValue) {
        guard firstError == nil else { return }
        do {
            let entry = BusValue.DictEntry(.string(name.string), .variant(try value.busValue()))
            let last = objects.count - 1
            objects[last].interfaces[objects[last].interfaces.count - 1].entries.append(entry)
        } catch {
            firstError = error
        }
    }
    public mutating func invalidated(_ name: WireName) { invalidatedNames.append(name.string) }
    public mutating func interfaceRemoved(_ name: WireName) { removed.append(name.string) }
    public mutating func end() {}

    /// The body as `decodeBody` gives it for `shape`.
    /// - Throws: the first error a value's decoding threw.
    public func body(_ shape: BlueZShape) throws -> [BusValue] {
        if let firstError { throw firstError }
        func properties(_ entries: [BusValue.DictEntry]) -> BusValue {
            .dictionary(key: .string, value: .variant, entries)
        }
        func interfaces(_ list: [(name: String, entries: [BusValue.DictEntry])]) -> BusValue {
            .dictionary(
                key: .string, value: .propertyMap, list.map { .init(.string($0.name), properties($0.entries)) })
        }
        switch shape {
        case .propertiesChanged:
            let interface = objects.first?.interfaces.first
            return [
                .string(interface?.name ?? ""), properties(interface?.entries ?? []),
                .array(.string, invalidatedNames.map(BusValue.string)),
            ]
        case .interfacesAdded:
            return [
                .objectPath(ObjectPath(unchecked: objects.first?.path ?? "")),
                interfaces(objects.first?.interfaces ?? []),
            ]
        case .interfacesRemoved:
            return [
                .objectPath(ObjectPath(unchecked: objects.first?.path ?? "")),
                .array(.string, removed.map(BusValue.string)),
            ]
        case .managedObjects:
            return [
                .dictionary(
                    key: .objectPath, value: .dictionary(key: .string, value: .propertyMap),
                    objects.map { .init(.objectPath(ObjectPath(unchecked: $0.path)), interfaces($0.interfaces)) })
            ]
        }
    }
}
