// libdbus aborts the process when it is handed an invalid path or name, so
// every name is validated here, once, by the same libdbus functions, before
// it can reach a message. A value of these types is valid by construction.

/// A validated D-Bus object path, such as `/org/bluez/hci0`.
public struct ObjectPath: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String

    /// Validates `rawValue` with `LibDBus.validatePath`.
    /// - Throws: `BusError` named `InvalidArgs` if it is not a valid path.
    public init(_ rawValue: String) throws {
        guard LibDBus.validatePath(rawValue) else {
            throw BusError.invalidArgs("Invalid object path '\(rawValue.debugEscaped)'")
        }
        self.rawValue = rawValue
    }

    /// A path written in the source. An invalid literal is a programming
    /// error and stops the program, like `URL(string:)!`.
    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(error)") }
    }

    init(unchecked rawValue: String) { self.rawValue = rawValue }

    public static let root = ObjectPath(unchecked: "/")

    public var description: String { rawValue }

    public static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The path's elements: `/org/bluez` gives `["org", "bluez"]`.
    public var components: [Substring] {
        rawValue.split(separator: "/", omittingEmptySubsequences: true)
    }

    /// The ancestor made of the first `depth` elements (`/a/b` of
    /// `/a/b/c` for 2), or nil unless the path has more than `depth`.
    /// Found by counting slashes, with nothing split: cheap enough for
    /// every signal.
    public func ancestor(depth: Int) -> ObjectPath? {
        guard depth > 0 else { return nil }
        let utf8 = rawValue.utf8
        var slashes = 0
        for index in utf8.indices where utf8[index] == UInt8(ascii: "/") {
            slashes += 1
            if slashes == depth + 1 { return ObjectPath(unchecked: String(rawValue[..<index])) }
        }
        return nil
    }

    /// The path one level up, or nil for `/`.
    public var parent: ObjectPath? {
        guard self != .root else { return nil }
        let index = rawValue.lastIndex(of: "/")!
        return index == rawValue.startIndex
            ? .root : ObjectPath(unchecked: String(rawValue[..<index]))
    }

    /// This path with one more element.
    /// - Throws: if `element` is not a valid path element (`[A-Za-z0-9_]+`).
    public func appending(_ element: String) throws -> ObjectPath {
        try ObjectPath(self == .root ? "/" + element : rawValue + "/" + element)
    }

    /// True when `other` lies strictly below this path.
    public func isAncestor(of other: ObjectPath) -> Bool {
        if self == .root { return other != .root }
        return other.rawValue.hasPrefix(rawValue + "/")
    }
}

/// A validated interface name, such as `org.bluez.Device1`.
public struct InterfaceName: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String

    /// A name libdbus validated already (a received message's header).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// Validates `rawValue` with `LibDBus.validateInterface`.
    public init(_ rawValue: String) throws {
        guard LibDBus.validateInterface(rawValue) else {
            throw BusError.invalidArgs("Invalid interface name '\(rawValue.debugEscaped)'")
        }
        self.rawValue = rawValue
    }

    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(error)") }
    }

    public var description: String { rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    public static let properties: InterfaceName = "org.freedesktop.DBus.Properties"
    public static let objectManager: InterfaceName = "org.freedesktop.DBus.ObjectManager"
    public static let introspectable: InterfaceName = "org.freedesktop.DBus.Introspectable"
    public static let peer: InterfaceName = "org.freedesktop.DBus.Peer"
    public static let bus: InterfaceName = "org.freedesktop.DBus"
    static let local: InterfaceName = "org.freedesktop.DBus.Local"
}

/// A validated method or signal name, such as `Connect`.
public struct MemberName: Hashable, Sendable, Comparable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String

    /// A name libdbus validated already (a received message's header).
    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// Validates `rawValue` with `LibDBus.validateMember`.
    public init(_ rawValue: String) throws {
        guard LibDBus.validateMember(rawValue) else {
            throw BusError.invalidArgs("Invalid member name '\(rawValue.debugEscaped)'")
        }
        self.rawValue = rawValue
    }

    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(error)") }
    }

    public var description: String { rawValue }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A validated bus name: unique (`:1.42`) or well-known (`org.bluez`).
public struct BusName: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    /// Validates `rawValue` with `LibDBus.validateBusName`.
    public init(_ rawValue: String) throws {
        guard LibDBus.validateBusName(rawValue) else {
            throw BusError.invalidArgs("Invalid bus name '\(rawValue.debugEscaped)'")
        }
        self.rawValue = rawValue
    }

    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(error)") }
    }

    public var description: String { rawValue }
    /// True for a connection's unique name (`:1.42`).
    public var isUnique: Bool { rawValue.hasPrefix(":") }

    /// The message bus itself.
    public static let bus: BusName = "org.freedesktop.DBus"
}

extension BusErrorName {
    /// True when `rawValue` is a name libdbus accepts as an error name.
    var isValid: Bool { LibDBus.validateErrorName(rawValue) }
}

/// A validated type signature, such as `a{sv}` or `oa{sa{sv}}`.
public struct Signature: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String
    /// The complete types the signature is made of, in order.
    public let types: [BusType]

    /// Validates `rawValue` with `LibDBus.signatureValidate` and parses it.
    public init(_ rawValue: String) throws {
        guard LibDBus.signatureValidate(rawValue) else {
            throw BusError.invalidSignature("Invalid signature '\(rawValue.debugEscaped)'")
        }
        self.rawValue = rawValue
        self.types = try BusType.parse(rawValue)
    }

    public init(stringLiteral value: String) {
        do { try self.init(value) } catch { preconditionFailure("\(error)") }
    }

    /// The signature of a sequence of types.
    public init(_ types: [BusType]) throws {
        try self.init(types.map(\.signature).joined())
    }

    public static let empty = Signature(unchecked: "", types: [])

    init(unchecked rawValue: String, types: [BusType]) {
        self.rawValue = rawValue
        self.types = types
    }

    public var description: String { rawValue }
}

extension String {
    /// The string with control characters escaped, for error messages about
    /// names that may come from anywhere.
    var debugEscaped: String {
        var out = ""
        for scalar in unicodeScalars.prefix(300) {
            if scalar.value < 0x20 || scalar.value == 0x7F {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return unicodeScalars.count > 300 ? out + "…" : out
    }
}
