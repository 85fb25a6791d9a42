/// Writes `org.freedesktop.DBus.Introspectable` XML for a node, as
/// `busctl introspect` and `gdbus introspect` read it.
enum Introspection {
    static let doctype = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
        """

    static func xml(for path: ObjectPath, in tree: ObjectTree) -> String {
        var out = doctype + "\n<node>\n"
        for interface in standardInterfaces(isObject: tree[path] != nil, isManager: tree.managers.contains(path)) {
            write(interface, into: &out)
        }
        if let object = tree[path] {
            for name in object.order {
                if let entry = object.interfaces[name] { write(entry.definition, into: &out) }
            }
        }
        for child in tree.childNames(of: path) {
            out += "  <node name=\"\(escape(child))\"/>\n"
        }
        return out + "</node>\n"
    }

    private static func write(_ interface: BusInterface, into out: inout String) {
        out += "  <interface name=\"\(escape(interface.name.rawValue))\">\n"
        for method in interface.methods {
            out += "    <method name=\"\(escape(method.name.rawValue))\">\n"
            for argument in method.inputs { out += argumentXML(argument, direction: "in") }
            for argument in method.outputs { out += argumentXML(argument, direction: "out") }
            out += "    </method>\n"
        }
        for signal in interface.signals {
            out += "    <signal name=\"\(escape(signal.name.rawValue))\">\n"
            for argument in signal.arguments { out += argumentXML(argument, direction: nil) }
            out += "    </signal>\n"
        }
        for property in interface.properties {
            let access =
                switch property.access {
                case .read: "read"
                case .write: "write"
                case .readwrite: "readwrite"
                }
            out +=
                "    <property name=\"\(escape(property.name))\" type=\"\(escape(property.type.signature))\" access=\"\(access)\""
            if property.changeSignal == .emits {
                out += "/>\n"
            } else {
                out +=
                    ">\n      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"\(property.changeSignal.rawValue)\"/>\n    </property>\n"
            }
        }
        out += "  </interface>\n"
    }

    private static func argumentXML(_ argument: BusInterface.Argument, direction: String?) -> String {
        var out = "      <arg"
        if let name = argument.name { out += " name=\"\(escape(name))\"" }
        out += " type=\"\(escape(argument.type.signature))\""
        if let direction { out += " direction=\"\(direction)\"" }
        return out + "/>\n"
    }

    static func escape(_ text: String) -> String {
        var out = ""
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            default: out.append(character)
            }
        }
        return out
    }

    /// The interfaces the binding itself serves on every node.
    static func standardInterfaces(isObject: Bool, isManager: Bool) -> [BusInterface] {
        let noop: BusInterface.Handler = { _ in [] }
        var interfaces = [
            BusInterface(
                name: .introspectable,
                methods: [
                    .init(name: "Introspect", outputs: [.init("xml_data", .string)], handler: noop)
                ]),
            BusInterface(
                name: .peer,
                methods: [
                    .init(name: "Ping", handler: noop),
                    .init(name: "GetMachineId", outputs: [.init("machine_uuid", .string)], handler: noop),
                ]),
        ]
        if isObject {
            interfaces.append(
                BusInterface(
                    name: .properties,
                    methods: [
                        .init(
                            name: "Get", inputs: [.init("interface_name", .string), .init("property_name", .string)],
                            outputs: [.init("value", .variant)], handler: noop),
                        .init(
                            name: "GetAll", inputs: [.init("interface_name", .string)],
                            outputs: [.init("props", .propertyMap)], handler: noop),
                        .init(
                            name: "Set",
                            inputs: [
                                .init("interface_name", .string), .init("property_name", .string),
                                .init("value", .variant),
                            ], handler: noop),
                    ],
                    signals: [
                        .init(
                            name: "PropertiesChanged",
                            arguments: [
                                .init("interface_name", .string), .init("changed_properties", .propertyMap),
                                .init("invalidated_properties", .array(.string)),
                            ])
                    ]))
        }
        if isManager {
            interfaces.append(
                BusInterface(
                    name: .objectManager,
                    methods: [
                        .init(
                            name: "GetManagedObjects",
                            outputs: [
                                .init(
                                    "objects",
                                    .dictionary(key: .objectPath, value: .dictionary(key: .string, value: .propertyMap))
                                )
                            ],
                            handler: noop)
                    ],
                    signals: [
                        .init(
                            name: "InterfacesAdded",
                            arguments: [
                                .init("object", .objectPath),
                                .init("interfaces", .dictionary(key: .string, value: .propertyMap)),
                            ]),
                        .init(
                            name: "InterfacesRemoved",
                            arguments: [
                                .init("object", .objectPath), .init("interfaces", .array(.string)),
                            ]),
                    ]))
        }
        return interfaces
    }
}
