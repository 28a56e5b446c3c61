//! A [`crate::analysis::Profile`] as OpenTelemetry's profiles signal (OTLP): work in progress,
//! the messages first.

#[allow(dead_code)]
mod proto;

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::proto::*;

    /// A request with one profile decodes back to itself (the wire types line up).
    #[test]
    fn a_request_reads_back() {
        let req = ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "host.name".into(),
                        value: Some(AnyValue {
                            value: Some(Value::String("h".into())),
                        }),
                    }],
                    dropped_attributes_count: 0,
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: None,
                    profiles: vec![Profile {
                        time_unix_nano: 1,
                        samples: vec![Sample {
                            stack_index: 1,
                            values: vec![3],
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
            dictionary: Some(ProfilesDictionary {
                string_table: vec![String::new(), "f".into()],
                stack_table: vec![
                    Stack::default(),
                    Stack {
                        location_indices: vec![0],
                    },
                ],
                ..Default::default()
            }),
        };
        let bytes = req.encode_to_vec();
        assert_eq!(
            ExportProfilesServiceRequest::decode(&bytes[..]).unwrap(),
            req
        );
    }
}
