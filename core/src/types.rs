//! Type information carried by every topic: eCAL's `SDataTypeInformation`.

/// {name, encoding, descriptor} of a topic's messages, as eCAL writes it in registration
/// (`datatype_information`: 1 name, 2 encoding, 3 descriptor bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TypeInfo {
    /// Full type name, e.g. `pb.Imu` (protobuf) or `demo.Type`.
    pub name: String,
    /// Serialization format, e.g. `proto`, `flatb`, `raw` or empty.
    pub encoding: String,
    /// Schema bytes (for protobuf a serialized `FileDescriptorSet`), may be empty.
    pub descriptor: Vec<u8>,
}

impl TypeInfo {
    /// Type information for untyped bytes with a name.
    pub fn raw(name: impl Into<String>) -> Self {
        TypeInfo { name: name.into(), encoding: "raw".into(), descriptor: Vec::new() }
    }

    /// Type information with a name, an encoding and a descriptor.
    pub fn new(name: impl Into<String>, encoding: impl Into<String>, descriptor: impl Into<Vec<u8>>) -> Self {
        TypeInfo { name: name.into(), encoding: encoding.into(), descriptor: descriptor.into() }
    }

    /// True when nothing is known about the type.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty() && self.encoding.is_empty() && self.descriptor.is_empty()
    }
}
