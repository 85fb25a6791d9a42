/// A D-Bus match rule: which messages the bus should route to this
/// connection, and which of them a subscriber receives.
///
/// The bus filters by the rule; the connection filters again, so that each
/// subscriber gets only what its own rule matches even when several rules
/// are active. A well-known `sender` is resolved to its current owner, as
/// the bus does.
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    public var kind: BusMessage.Kind? = .signal
    public var sender: BusName?
    public var interface: InterfaceName?
    public var member: MemberName?
    public var path: ObjectPath?
    public var pathNamespace: ObjectPath?
    public var destination: BusName?
    /// `argN='value'`: the Nth argument is a string equal to the value.
    public var arguments: [Int: String] = [:]
    /// `argNpath='value'`: the Nth argument is a string or path equal to
    /// the value, or one is a prefix of the other ending in `/`.
    public var argumentPaths: [Int: String] = [:]
    /// `arg0namespace='a.b'`: argument 0 is `a.b` or starts with `a.b.`.
    public var arg0Namespace: String?

    public init(
        kind: BusMessage.Kind? = .signal, sender: BusName? = nil, interface: InterfaceName? = nil,
        member: MemberName? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
        arguments: [Int: String] = [:]
    ) {
        self.kind = kind
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arguments = arguments
    }

    /// `PropertiesChanged` of one interface (or any), below a path namespace.
    public static func propertiesChanged(
        sender: BusName? = nil, interface: InterfaceName? = nil, pathNamespace: ObjectPath? = nil
    ) -> MatchRule {
        var rule = MatchRule(
            sender: sender, interface: .properties, member: "PropertiesChanged",
            pathNamespace: pathNamespace)
        if let interface { rule.arguments[0] = interface.rawValue }
        return rule
    }

    /// `InterfacesAdded` and `InterfacesRemoved` need one rule each.
    public static func interfacesAdded(sender: BusName? = nil, path: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, interface: .objectManager, member: "InterfacesAdded", path: path)
    }

    public static func interfacesRemoved(sender: BusName? = nil, path: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, interface: .objectManager, member: "InterfacesRemoved", path: path)
    }

    /// `NameOwnerChanged` for one name (or all).
    public static func nameOwnerChanged(_ name: BusName? = nil) -> MatchRule {
        var rule = MatchRule(sender: .bus, interface: .bus, member: "NameOwnerChanged", path: "/org/freedesktop/DBus")
        if let name { rule.arguments[0] = name.rawValue }
        return rule
    }

    /// The rule as the bus' AddMatch reads it, values quoted.
    public var description: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            parts.append("\(key)=\(Self.quote(value))")
        }
        let kindName: String? = kind.map {
            switch $0 {
            case .signal: "signal"
            case .methodCall: "method_call"
            case .methodReturn: "method_return"
            case .error: "error"
            }
        }
        add("type", kindName)
        add("sender", sender?.rawValue)
        add("interface", interface?.rawValue)
        add("member", member?.rawValue)
        add("path", path?.rawValue)
        add("path_namespace", pathNamespace?.rawValue)
        add("destination", destination?.rawValue)
        for (index, value) in arguments.sorted(by: { $0.key < $1.key }) { add("arg\(index)", value) }
        for (index, value) in argumentPaths.sorted(by: { $0.key < $1.key }) { add("arg\(index)path", value) }
        add("arg0namespace", arg0Namespace)
        return parts.joined(separator: ",")
    }

    /// Quotes a value as the match-rule grammar wants: inside apostrophes,
    /// an apostrophe written as `'\''`.
    static func quote(_ value: String) -> String {
        var quoted = "'"
        for character in value {
            if character == "'" { quoted += "'\\''" } else { quoted.append(character) }
        }
        return quoted + "'"
    }

    /// Checks what the bus cannot know for us: arguments, and the local
    /// resolution of a well-known sender.
    /// - Parameter ownerOf: the current unique owner of a well-known name.
    func matches(_ message: BusMessage, ownerOf: (String) -> String?) -> Bool {
        if let kind, kind != message.kind { return false }
        if let sender {
            let expected = sender.isUnique || sender == .bus ? sender.rawValue : ownerOf(sender.rawValue)
            guard let expected, expected == message.sender else { return false }
        }
        if let interface, interface != message.interface { return false }
        if let member, member != message.member { return false }
        if let path, path != message.path { return false }
        if let pathNamespace {
            guard let messagePath = message.path,
                pathNamespace == messagePath || pathNamespace.isAncestor(of: messagePath)
            else { return false }
        }
        if let destination, destination.rawValue != message.destination { return false }
        for (index, expected) in arguments {
            guard index < message.body.count, case .string(let actual) = message.body[index],
                actual == expected
            else { return false }
        }
        for (index, expected) in argumentPaths {
            guard index < message.body.count else { return false }
            let actual: String
            switch message.body[index] {
            case .string(let s): actual = s
            case .objectPath(let p): actual = p.rawValue
            default: return false
            }
            let related =
                actual == expected
                || (expected.hasSuffix("/") && actual.hasPrefix(expected))
                || (actual.hasSuffix("/") && expected.hasPrefix(actual))
            guard related else { return false }
        }
        if let arg0Namespace {
            guard let first = message.body.first, case .string(let actual) = first,
                actual == arg0Namespace || actual.hasPrefix(arg0Namespace + ".")
            else { return false }
        }
        return true
    }
}
