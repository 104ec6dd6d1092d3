// The kind of one limit as a form chooses it (the group editor, the tree's bulk edit): its type and its unit, two
// selects, each named for a screen reader by the form's label of the limit. COST (dollars, shown in micro-USD to the
// API) is a usage limit only: choosing it moves a rolling unit to MONTH, and its rolling units are not offered.
export function LimitKindSelects(props: { label: string; type: string; unit: string; onKind: (type: string, unit: string) => void }) {
  const cost = props.type === "COST";
  return (
    <>
      <label>
        <span class="sr-only">{props.label} type</span>
        <select value={props.type} onChange={(e) => {
          const type = (e.target as HTMLSelectElement).value;
          props.onKind(type, type === "COST" && !USAGE_UNITS.includes(props.unit) ? "MONTH" : props.unit);
        }}>
          <option value="REQUEST">REQUEST</option>
          <option value="TOKEN">TOKEN</option>
          <option value="COST">COST ($)</option>
        </select>
      </label>
      <label>
        <span class="sr-only">{props.label} unit</span>
        <select value={props.unit} onChange={(e) => props.onKind(props.type, (e.target as HTMLSelectElement).value)}>
          <option value="SECOND" disabled={cost}>per SECOND</option>
          <option value="MINUTE" disabled={cost}>per MINUTE</option>
          <option value="DAY">per DAY (usage)</option>
          <option value="MONTH">per MONTH (usage)</option>
        </select>
      </label>
    </>
  );
}

// USAGE_UNITS are the units of usage limits (calendar periods, UTC); the others are rate limits' rolling windows.
export const USAGE_UNITS = ["DAY", "MONTH"];

// limitList is the list of a model a limit of unit belongs to.
export function limitList(unit: string): "usage_limits" | "rate_limits" {
  return USAGE_UNITS.includes(unit) ? "usage_limits" : "rate_limits";
}
