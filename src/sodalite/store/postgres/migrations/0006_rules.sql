-- Version 6: a subscription's rules become rows of their own (PutRule, DeleteRule), keyed by the
-- folded subscription path and rule name, so two nodes changing rules of one subscription at once
-- keep both changes; the rules of existing subscription records move there, in their order.

CREATE TABLE sodalite_rules (
    subscription bytea  NOT NULL,
    name_key     bytea  NOT NULL,
    name         text   NOT NULL,
    position     bigint NOT NULL,
    rule         text   NOT NULL,
    PRIMARY KEY (subscription, name_key)
);

INSERT INTO sodalite_rules (subscription, name_key, name, position, rule)
SELECT e.path_key, convert_to(translate(r.value->>'Name', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                                        'abcdefghijklmnopqrstuvwxyz'), 'UTF8'),
       r.value->>'Name', r.position, r.value::text
FROM sodalite_entities e,
     jsonb_array_elements(CASE WHEN jsonb_typeof(e.properties::jsonb->'Rules') = 'array'
                               THEN e.properties::jsonb->'Rules' ELSE '[]'::jsonb END)
         WITH ORDINALITY AS r(value, position)
WHERE e.kind = 'subscription' AND jsonb_typeof(r.value->'Name') = 'string'
ON CONFLICT (subscription, name_key) DO UPDATE SET name = excluded.name, position = excluded.position,
    rule = excluded.rule;

UPDATE sodalite_entities SET properties = (properties::jsonb - 'Rules')::text
WHERE kind = 'subscription' AND jsonb_exists(properties::jsonb, 'Rules');
